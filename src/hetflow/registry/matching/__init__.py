"""A machine type's view of an image index, the one build it should pull
(views), matched once off the event loop and kept (viewcache), and big documents' pure
work in a worker process (offload).
"""
