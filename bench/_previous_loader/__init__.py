"""The workflow loader as of commit 4aabbd9, for bench/loader.py only."""
