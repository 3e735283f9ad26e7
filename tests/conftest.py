"""Test-suite settings. The shared helper modules here (harness_helpers, fixture_data, stream_helpers, fuzz_helpers)
import by name from every test folder because pyproject.toml's pytest config puts tests/ on the path
(``pythonpath``)."""

# Property-based (fuzz) tests, tests/fuzz: the "ci" profile, the default, is derandomised (the same
# examples on every run) with a fixed budget per test, so the suite stays deterministic and inside CI's
# time; HYPOTHESIS_PROFILE=explore searches with fresh random examples and a larger budget.
try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the fuzz tests skip themselves without Hypothesis
    pass
else:
    import os

    _QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    settings.register_profile(
        "ci",
        derandomize=True,
        max_examples=25,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=_QUIET,
    )
    settings.register_profile("explore", max_examples=500, deadline=None, suppress_health_check=_QUIET)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
