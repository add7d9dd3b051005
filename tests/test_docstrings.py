"""Every public function and class of the library's stage packages says in one line what it does."""

import importlib
import inspect
import pkgutil

import pytest

import adsl

PACKAGES = ("adsl.perf", "adsl.sim", "adsl.fitting", "adsl.profiling")


def public_objects():
    for pkg in PACKAGES:
        for info in pkgutil.iter_modules(importlib.import_module(pkg).__path__, pkg + "."):
            if info.name.endswith(("offline_models", "loop")) and importlib.util.find_spec("torch") is None:
                continue  # modules that need the profile extra
            mod = importlib.import_module(info.name)
            for name, obj in vars(mod).items():
                if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                    continue
                if inspect.isfunction(obj) or inspect.isclass(obj):
                    yield f"{mod.__name__}.{name}", obj


def test_every_public_function_has_a_docstring():
    missing = [name for name, obj in public_objects() if not (obj.__doc__ or "").strip()]
    assert not missing, f"{len(missing)} without a docstring: {missing}"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_packages_say_what_they_hold(pkg):
    assert (importlib.import_module(pkg).__doc__ or "").strip()
    assert adsl.__doc__
