"""The CWL v1.2 conformance run (issue 40): stand-in images, cwltest against hetflow and cwltool, the table."""
