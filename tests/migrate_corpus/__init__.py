"""The codemod's real-world corpus: released LightningModules from public repositories, obtained from
PyPI at test time (see ``sources.py``); ``expected.json`` pins what the codemod does to each."""
