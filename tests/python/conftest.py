"""Session rules for the Python tests."""

import importlib
import os

import pytest


def pytest_configure(config):
    # The torch tests skip where torch is missing (a numpy-only install). `make test` installs torch and
    # transformers and sets FLASHATTN_REQUIRE_TORCH, so that there a broken install fails the run instead of
    # skipping the tests of the API most users call.
    if os.environ.get("FLASHATTN_REQUIRE_TORCH", "0") not in ("", "0"):
        for module in ("torch", "transformers"):
            try:
                importlib.import_module(module)
            except Exception as e:  # noqa: BLE001 - any import failure is the failure reported
                raise pytest.UsageError(f"FLASHATTN_REQUIRE_TORCH is set but {module} does not import: {e!r}")


def pytest_sessionfinish(session, exitstatus):
    # pytest exits with 5 when it collected nothing (a wrong path, a broken import filtered away, every
    # file skipped at import): that is a failure of the run, never a pass.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("flashattn: no test was collected; failing the session", red=True)
