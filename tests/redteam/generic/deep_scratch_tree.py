# drill: flashattention/{{ID}}
# Attack on the clean-up: a folder nested thousands deep in the subject's own scratch folder (with
# chdir, so no path is ever long). shutil.rmtree recurses once per level: removing the grading's
# scratch raised RecursionError, `drill check` ended in a traceback instead of a verdict, and the
# folder stayed on disk. The grading must end in a verdict and leave nothing behind.
import os


def _deep():
    here = os.getcwd()
    try:
        for _ in range(3000):
            os.mkdir("d")
            os.chdir("d")
    except OSError:
        pass
    os.chdir(here)


_deep()


def _attack(*args, **kwargs):
    return None


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
