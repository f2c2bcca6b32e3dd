"""``python -m compose_lens.sweep JOB``: the worker process of :func:`compose_lens.sweep.train_points_in_process`,
which trains a job file's runs (:func:`compose_lens.sweep.train_points`) and prints their rows as one line of JSON.
"""

import json
import sys
from pathlib import Path

from compose_lens.sweep import train_points

job = json.loads(Path(sys.argv[1]).read_text())
print(json.dumps(train_points(job["configs"], job["run_dirs"], job["threads"])))
