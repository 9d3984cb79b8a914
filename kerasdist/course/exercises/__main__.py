import sys

from kerasdist.course.exercises.selftest import main

sys.exit(main())
