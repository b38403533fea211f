"""Stand-in for the `expecttest` package (not packaged by Debian), which
torch.testing._internal.common_utils imports. Only what common_utils uses:
ACCEPT and a TestCase with assertExpectedInline comparing exactly (no
rewriting of the test's source, as ACCEPT would do)."""
import textwrap
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (expecttest's name)
        del skip
        self.assertEqual(textwrap.dedent(expect).strip(), textwrap.dedent(actual).strip())

    def assertExpectedRaisesInline(self, exc_type, callable_, expect, *args, **kwargs):  # noqa: N802
        try:
            callable_(*args, **kwargs)
        except exc_type as e:
            self.assertExpectedInline(str(e), expect)
            return
        self.fail("Did not raise when expected to")
