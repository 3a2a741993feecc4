"""Publishing a step's outputs when it succeeds: the publish set
(publish), what may be replaced (rule), the journal written before a target is touched
(journal), and each target kind: a host folder (host), an S3 prefix (s3).
"""
