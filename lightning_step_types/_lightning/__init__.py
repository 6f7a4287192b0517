"""Every access to a name Lightning (or torch, torchmetrics) keeps private, in this one package.

A Lightning upgrade is this package to check: each function says which private name it reads
and what it relies on. Both flavours (``pytorch_lightning`` and ``lightning.pytorch``) share it.
Its modules import nothing else of the library.

- ``trainer``: The Trainer a module runs in, and what it is doing.
- ``compile``: ``torch.compile``d modules, as Lightning unwraps them.
- ``result_collection``: Lightning's result collections: what ``self.log`` holds, and the epoch's running aggregates.
- ``instance_methods``: Methods replaced on an instance, and put back.
- ``fit_loop``: The fit loop, followed for exact resume: its loops, counters and checkpointed state.
- ``module_state``: What torch and torchmetrics keep privately in a module: running statistics, gradients, metric states.
- ``data``: The training data: combined loaders, their saved states, samplers and the order they draw.
- ``saves``: Saves that some processes may not reach: the process group's store and the save barrier.
- ``averaging``: StochasticWeightAveraging: what its loading keeps for its set-up, and whether that set-up ran.
- ``random_state``: The process's global random streams: torch's (CPU and CUDA), numpy's and Python's ``random``.
"""
