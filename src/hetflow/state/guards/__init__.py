"""What keeps the store sound: waiting out a busy store (busy), checking it is
whole and its disk not full (integrity), keeping it its user's alone (private), and telling
a live executor from a gone one (liveness).
"""
