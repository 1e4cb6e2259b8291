"""Session rules for the Python tests."""

import pytest


def pytest_sessionfinish(session, exitstatus):
    # pytest exits with 5 when it collected nothing (a wrong path, a broken import filtered away, every
    # file skipped at import): that is a failure of the run, never a pass.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("flashattn: no test was collected; failing the session", red=True)
