"""``python -m bench.conformance``: what ``make conformance`` runs (``bench.conformance.run.main``)."""

from bench.conformance.run import main

raise SystemExit(main())
