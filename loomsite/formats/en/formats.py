"""Times to the second everywhere (the admin's lists and pages): a PM reading turns
needs to tell two turns a few seconds apart."""

DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
TIME_FORMAT = "H:i:s"
