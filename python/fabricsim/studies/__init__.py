"""Studies: many scenarios built, run and reported.

* :mod:`~fabricsim.studies.sweep`: a function of parameters run over a grid of them, the
  results joined into one table (``fs.sweep``);
* :mod:`~fabricsim.studies.scenario_file`: a whole study in one TOML file
  (``fabricsim run FILE``, ``fs.load_scenario``);
* :mod:`~fabricsim.studies.nccl_tests`: nccl-tests simulated, one collective per size
  (``fs.nccl_tests``);
* :mod:`~fabricsim.studies.validation`: the simulated collectives against every public
  measurement (``fs.validate``, ``fabricsim validate``);
* :mod:`~fabricsim.studies.plot` and :mod:`~fabricsim.studies.trace`: results drawn, and
  written as a timeline for Perfetto (``fs.plot``, ``fs.trace``);
* :mod:`~fabricsim.studies.demo`: the scenario ``fabricsim demo`` runs.

A study imports the workloads, the scenario and what is below them; only the CLI and the
package's front imports it.
"""
