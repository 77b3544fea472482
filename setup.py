"""Build hook for the one compiled module: the bookie journal's writer thread (``_journal_writer.c``).

Everything else is in ``pyproject.toml``. The extension is optional: where it cannot be built
(no compiler, no Python headers) the install goes on and ``magnetar.bookie.journal_writer`` uses
its pure-Python twin, which behaves the same, only with more GIL hand-overs per sync.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "magnetar.bookie._journal_writer",
            ["services/magnetar/bookie/_journal_writer.c"],
            extra_compile_args=["-O2"],
            libraries=["pthread"],
            optional=True,
        )
    ]
)
