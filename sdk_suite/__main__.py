import sys

from sdk_suite.run import main

sys.exit(main())
