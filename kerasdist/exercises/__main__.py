import sys

from kerasdist.exercises.selftest import main

sys.exit(main())
