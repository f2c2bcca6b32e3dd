"""Layer 0, what every other layer stands on: settings (config), errors, files, provenance, the study's
constants, statistics (intervals and tests), progress lines, the HTML markup, and the capability checks."""
