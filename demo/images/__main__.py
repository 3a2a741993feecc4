"""``python -m demo.images``: what ``make images`` runs (``demo.images.main``)."""

from demo.images import main

raise SystemExit(main())
