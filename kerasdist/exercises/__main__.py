import os
import sys

from kerasdist.exercises.selftest import main

status = main()
sys.stdout.flush()
sys.stderr.flush()
# rpy2 ends R at exit, which never returns with reticulate's Python and TensorFlow's threads in this
# process: leave without the exit handlers (every row is printed; nothing is left to write).
os._exit(status)
