"""The commands that speak to registries: images inspect, resolve, build-index (images);
registry serve and login (registry).
"""
