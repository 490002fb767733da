"""``assert_declarations_match``: the static check of SPEC §15 inside a plugin's own tests."""

from __future__ import annotations

from genwire.generators.source_check import Severity, check_generator


def assert_declarations_match(generator_class: type, *, strict: bool = True) -> None:
    """Fail (AssertionError listing the findings) when ``generator_class``'s code uses a
    resource slot its ``required_resources`` does not declare. With ``strict`` (the
    default) warnings fail too: a declared slot no code uses, a use the check cannot read
    (``getattr(self.resources, name)``, the generator or its resources handed to code
    outside the plugin's package). Notes (source not found) never fail."""
    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    findings = [f for f in check_generator(generator_class) if f.severity in failing]
    if findings:
        name = generator_class.__qualname__
        lines = "\n".join(f"  {f}" for f in findings)
        raise AssertionError(f"{name}: its code and its required_resources disagree:\n{lines}")
