"""``kerasdist doctor``: what this machine has, what each lesson needs, and which engine each strategy gets.

``checks`` holds the machine checks, ``probes`` runs the probes of upstream
Keras bugs, ``report`` runs both and formats the table.
"""

from kerasdist.doctor.checks import BROKEN, MISSING, OK, Check
from kerasdist.doctor.report import diagnose, format_report

__all__ = ["BROKEN", "MISSING", "OK", "Check", "diagnose", "format_report"]
