"""``simfl report STORE``: PNG figures of a results store and an ``index.html`` that shows them.

>>> # from simfl.report import write_report
>>> # write_report("runs/sweep", "runs/sweep/report", target=("distance", "below", 1e-3))

The report compares *series* (the policies, or whatever the sweep's grid varied) in every
*panel*: a fleet size and a value of every other grid label that varies (another fleet of the
same size, a capacity, ...), over the seeds of each, so that no number mixes runs of different
settings:

* ``metric_vs_rounds.png`` and ``metric_vs_time.png``: the metric per series, mean over seeds
  with a 95% bootstrap band, one panel per panel key;
* ``speedup.png``: time-to-target of the baseline series divided by that of each series in the
  same panel, against the fleet size (a paired bootstrap 95% CI over seeds);
* a time-to-target table (mean, bootstrap 95% CI, median, rounds; also ``time_to_target.csv``);
* ``gantt.png``: the device jobs of one run, coloured by status: the devices with late or
  dropped jobs, then the slowest others;
* ``utilisation.png``: the fraction of simulated time each device spent in a job, per panel;
* ``staleness.png``: the staleness of the applied updates (0 for synchronous policies);
* for a store that holds searches (``simfl tune``; :mod:`simfl.report.searches`), a section
  per search first: the best setting over the search's seeds and fresh seeds, its
  constraints, the warnings, ``search-N-history.png``, ``search-N-importance.png`` and (two
  objectives) ``search-N-front.png``; the runs then form one series per setting.

A target never reached reads the same everywhere: time ``inf`` for the seeds that miss it, no
speedup (NaN, never 0x) where a seed of the series or of the baseline misses it, and "not
reached in k of n seeds" in the tables, the CSV files and under the figures. Runs whose rounds
were mostly empty are flagged at the top; runs of an older version of a scenario (the same
name, labels and seed with another fingerprint) are left out and listed, never mixed in.

The page is safe to open whoever made the store: every string it shows that comes from a
store, a scenario or the user (labels, names, metrics, errors, paths) is HTML-escaped, in text
and attributes, and is plain text (never TeX) in the figures; the files it writes have fixed
names; reading a store unpickles nothing and runs no code.

:mod:`simfl.report.choose` picks the series, the metric and its target (defaults described
there; the target ``simfl sweep --target`` recorded, :mod:`simfl.report.recorded`, comes
first), :mod:`simfl.report.figures` draws, :mod:`simfl.report.html` writes the page.
"""

from simfl.report.html import write_report

__all__ = ["write_report"]
