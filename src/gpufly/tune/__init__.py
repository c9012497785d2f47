"""The tuner: measure optimizations (knobs) on a workload, each trial in its own process, and keep the best safe one.

``Search`` runs a plan of trials through a runner and a ``ResultsLog``, re-measuring the baseline through the run
and confirming the fastest candidates in A/B rounds; ``KNOBS`` lists every knob; ``decide`` concludes (a winner
with its interval, no gain, undecided or too noisy) and ``best`` is its winner; ``gpufly.apply``
(``gpufly.tune.apply``) puts it into a training script. Importing this package does not import torch.
"""

from gpufly.tune.knobs import KNOBS, Knob, Target, code_for, offered
from gpufly.tune.results import ResultsLog, run_identity
from gpufly.tune.search import GreedyPlan, Search, Stage, StagePlan
from gpufly.tune.trial import Stopped, SubprocessRunner, Trial, TrialResult, stop_signals
from gpufly.tune.verdict import Decision, best, decide, judge
from gpufly.tune.workload import SearchSpace, Workload, WorkloadOption, search_space

__all__ = ["KNOBS", "Decision", "GreedyPlan", "Knob", "ResultsLog", "Search", "SearchSpace", "Stage", "StagePlan",
           "Stopped", "SubprocessRunner", "Target", "Trial", "TrialResult", "Workload", "WorkloadOption", "best",
           "code_for", "decide", "judge", "offered", "run_identity", "search_space", "stop_signals"]
