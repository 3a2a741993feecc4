import sys

from hetflow.cwl import main

sys.exit(main())
