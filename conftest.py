# The plugin is registered by the pytest11 entry point of an installed project (pip
# install -e .); this line serves a checkout used without installing it (PYTHONPATH, as
# .ci/torch-line does) or an install made before the entry point existed. Same name as the
# entry point's, so pytest registers the plugin once.
pytest_plugins = ["harness.plugin"]
