"""A new env against every lab (docs/layout.md, "Adding an env"): two throw-away env modules on
the env package's path, and every lab of the lab registry.  Each lab's ``--help`` works, and each
lab either does not offer a throw-away env (``--env <it>`` is one error line before anything is
computed or written) or offers it (``<it>`` is in ``envs.names(lab.NEEDS)``) and runs its quick
path on it.

* ``coin``: docs/layout.md's add-an-env recipe, word for word: its own ``Instance`` (``p``) and
  ``Env`` with per-token log-probs, none of the bandit's ``Instance`` fields (the kind of env
  that ended in ``AttributeError: 'Instance' object has no attribute 'B'`` in the off-policy
  lab);
* ``twin``: the bandit under another name (its ``Instance`` a subclass of the bandit's): a lab
  whose ``NEEDS`` admits it by capabilities and fields must run on it.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from gpolab import configs, engine, envs
from gpolab.kit import running
from gpolab.runner.cli import main
from tests.test_extension import blocks

THROWAWAY = {
    "coin": blocks()["gpolab/envs/coin.py"],  # docs/layout.md's recipe
    "twin": '''
        """The bandit under another name (a throw-away env of the tests)."""
        import dataclasses

        from gpolab.envs import bandit


        @dataclasses.dataclass(frozen=True)
        class Instance(bandit.Instance):
            pass


        ENV = dataclasses.replace(bandit.ENV, name="twin")
        ''',
}
LABS = running.names()


@pytest.fixture(scope="module")
def labs_with_new_envs(tmp_path_factory):
    """The throw-away envs on ``gpolab.envs``'s path and every lab imported afresh (a lab takes
    its env list when it loads); afterwards the registry and the lab modules are as before."""
    import gpolab.labs

    root = tmp_path_factory.mktemp("envs_extra")
    for name, text in THROWAWAY.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text).lstrip())
    saved = {k: m for k, m in sys.modules.items() if k.startswith("gpolab.labs.")}
    attrs = dict(vars(gpolab.labs))
    for k in saved:
        del sys.modules[k]
    path = envs.__path__
    envs.__path__ = [*path, str(root)]
    envs._modules.cache_clear()
    try:
        yield {name: running.get(name) for name in LABS}
    finally:
        envs.__path__ = path
        envs._modules.cache_clear()
        for k in [k for k in sys.modules if k.startswith(("gpolab.labs.", "gpolab.envs."))]:
            if k.startswith("gpolab.labs.") or k.rsplit(".", 1)[-1] in THROWAWAY:
                del sys.modules[k]
        sys.modules.update(saved)
        vars(gpolab.labs).clear()
        vars(gpolab.labs).update(attrs)


def test_the_throwaway_envs_are_envs(labs_with_new_envs):
    """Both are found by listing the package; ``coin`` lacks the bandit's fields, ``twin`` not."""
    assert {"coin", "twin"} <= set(envs.names("token_logp"))
    assert "twin" in envs.names("token_logp", "values", "kl", "mse_law")
    assert envs.missing("coin", envs.Needs(fields=("B", "kind"))) == ("Instance.B", "Instance.kind")
    assert envs.missing("twin", envs.Needs(("token_logp",), ("B", "kind", "lengths"))) == ()


@pytest.mark.parametrize("name", LABS)
def test_every_lab_runs_a_new_env_or_does_not_offer_it(name, labs_with_new_envs, tmp_path, capsys):
    lab = labs_with_new_envs[name]
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0 and f"gpolab {name}" in capsys.readouterr().out
    assert isinstance(lab.NEEDS, envs.Needs), "a lab states what it reads of an env (NEEDS)"
    takes_env = "env" in configs.names(lab.Config)
    for env in THROWAWAY:
        offered = env in envs.names(lab.NEEDS)
        assert takes_env or not offered, f"{name} offers {env} but has no env setting"
        if not takes_env:
            continue
        out = tmp_path / env
        argv = [name, "--env", env, "--quick", "--out", str(out)]
        if offered:
            assert main(argv) == 0, capsys.readouterr().err
            assert (out / "config.toml").exists()
            continue
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(engine, "run", lambda *a, **k: pytest.fail("computed"))
            assert main(argv) == 2, f"{name} runs {env}, which its NEEDS does not admit"
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "env" in err[0], err
        assert not out.exists()
