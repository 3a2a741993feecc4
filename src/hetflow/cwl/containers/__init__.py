"""A CWL job's container: made from what cwltool worked out (container), run alone or in a
batch with others (batch), and waited on with one poller for the whole run (waiting); the
session's ``launch`` puts them together on its backend."""
