"""Stage 1, what to run: perfgate's options (``settings``), the cases a suite declares (``cases``) and the
configuration matrices that generate them (``matrix``)."""
