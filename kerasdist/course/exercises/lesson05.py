"""Lesson 05's checked exercises: a TF_CONFIG, who keeps the logs, a cluster resolver without TF_CONFIG.

Each check hands the student's answer to TensorFlow: the TF_CONFIG text to its
``TFConfigClusterResolver``, the roles to its ``multi_worker_util.is_chief`` (less the evaluator),
the resolver to the same questions a ``MultiWorkerMirroredStrategy`` asks.

Example:
    >>> from kerasdist.course.exercises.lesson05 import q2
    >>> print(q2.verdict({"keeps_logs": lambda cluster, task_type, index: task_type == "chief"}))
    Incorrect: keeps_logs returned False for worker 0 of a cluster of worker, but without a chief in the cluster, worker 0 keeps the checkpoints and logs.
"""

import json
import os

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer

TF_CONTEXT = {
    "python": "import tensorflow as tf",
    "r": 'library(tensorflow, exclude = c("shape", "set_random_seed"))\nlibrary(reticulate)',
}
WORKERS = ["127.0.0.1:12345", "127.0.0.1:12346"]
CHIEF = ["127.0.0.1:12344"]
EVALUATOR = ["127.0.0.1:12347"]
CLUSTERS = (
    {"worker": WORKERS},
    {"chief": CHIEF, "worker": WORKERS},
    {"worker": WORKERS, "evaluator": EVALUATOR},
    {"chief": CHIEF, "worker": WORKERS, "evaluator": EVALUATOR},
)
# (cluster, task type, index) of the TF_CONFIG and resolver checks: every role, a single task among them.
TASKS = ((CLUSTERS[0], "worker", 0), (CLUSTERS[0], "worker", 1), (CLUSTERS[1], "chief", 0),
         (CLUSTERS[3], "evaluator", 0))


def _cluster_words(cluster):
    return ", ".join(cluster)


def _resolver_reads(text):
    """TensorFlow's TFConfigClusterResolver given ``text`` as TF_CONFIG: (cluster, task type, task id)."""
    import tensorflow as tf

    before = os.environ.get("TF_CONFIG")
    os.environ["TF_CONFIG"] = text
    try:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id
    finally:
        if before is None:
            del os.environ["TF_CONFIG"]
        else:
            os.environ["TF_CONFIG"] = before


# q1: a TF_CONFIG ------------------------------------------------------------------------------------------

def _check_make_tf_config(answers, language):
    function = answers["make_tf_config"]
    as_list = language.pick("", " (in R, lapply(cluster, as.list) keeps a single task a list)")
    for cluster, task_type, index in TASKS:
        text = call_answer(function, "make_tf_config", cluster, task_type, index)
        if not isinstance(text, str):
            kind = "a list" if language.name == "r" and isinstance(text, dict) else type(text).__name__
            raise Incorrect(f"make_tf_config returned {kind}, not JSON text: TF_CONFIG is an "
                            f"environment variable, so write the {language.pick('dict', 'list')} with "
                            f"{language.pick('json.dumps()', 'json$dumps()')}.")
        try:
            parsed = json.loads(text)
        except ValueError:
            raise Incorrect(f"make_tf_config returned {text[:60]!r}, which is not JSON: write it with "
                            f"{language.pick('json.dumps()', 'json$dumps()')}.") from None
        roles = parsed.get("cluster") if isinstance(parsed, dict) else None
        for role, tasks in (roles or {}).items() if isinstance(roles, dict) else ():
            if not isinstance(tasks, list):
                raise Incorrect(f"the tasks of {role!r} are written as {json.dumps(tasks)}, not a list: "
                                f"TensorFlow wants a JSON list for every role, even of one task{as_list}.")
        read_cluster, read_type, read_id = call_answer(_resolver_reads, "TensorFlow's TFConfigClusterResolver",
                                                       text)
        if read_cluster != cluster:
            raise Incorrect(f"TensorFlow's resolver read the cluster {json.dumps(read_cluster)}, not the one "
                            f"you were given: put cluster under the key \"cluster\".")
        if (read_type, read_id) != (task_type, index):
            raise Incorrect(f"TensorFlow's resolver read the task as {read_type} {language.value(read_id)}, but "
                            f"you were asked for {task_type} {index}: write {{\"type\": task_type, \"index\": "
                            f"index}} under the key \"task\".")
    return "TensorFlow's TFConfigClusterResolver reads your TF_CONFIG as the cluster and the task you were given."


q1 = Exercise(
    "05", "q1", "A TF_CONFIG",
    answers=("make_tf_config",),
    check_answers=_check_make_tf_config,
    hints=("TF_CONFIG is JSON text with two keys: \"cluster\" (every role's list of host:port) and \"task\" "
           "(this process's \"type\" and \"index\").",
           {"python": "return json.dumps({\"cluster\": cluster, \"task\": {\"type\": task_type, "
                      "\"index\": index}})",
            "r": "json$dumps(list(cluster = lapply(cluster, as.list), task = list(type = task_type, "
                 "index = index))): as.list() keeps a role with a single task a JSON list."}),
    solutions={
        "python": "def make_tf_config(cluster, task_type, index):\n"
                  "    return json.dumps({\"cluster\": cluster, \"task\": {\"type\": task_type, \"index\": index}})",
        "r": "make_tf_config <- function(cluster, task_type, index) {\n"
             "  json$dumps(list(cluster = lapply(cluster, as.list),\n"
             "                  task = list(type = task_type, index = index)))\n"
             "}",
    },
    starters={"python": "make_tf_config = None  # a function of (cluster, task_type, index) that returns text",
             "r": "make_tf_config <- NULL  # a function of (cluster, task_type, index) that returns text"},
    wrong=(
        WrongAnswer({"python": "def make_tf_config(cluster, task_type, index):\n"
                               "    return {\"cluster\": cluster, \"task\": {\"type\": task_type, \"index\": index}}",
                     "r": "make_tf_config <- function(cluster, task_type, index) {\n"
                          "  list(cluster = lapply(cluster, as.list), task = list(type = task_type, index = index))\n"
                          "}"},
                    "not JSON text"),
        WrongAnswer({"python": "def make_tf_config(cluster, task_type, index):\n"
                               "    return json.dumps({\"cluster\": cluster, \"task\": {\"type\": task_type}})",
                     "r": "make_tf_config <- function(cluster, task_type, index) {\n"
                          "  json$dumps(list(cluster = lapply(cluster, as.list), task = list(type = task_type)))\n"
                          "}"},
                    "you were asked for worker 0"),
        WrongAnswer({"python": "def make_tf_config(cluster, task_type, index):\n"
                               "    tasks = {role: \",\".join(hosts) for role, hosts in cluster.items()}\n"
                               "    return json.dumps({\"cluster\": tasks, \"task\": {\"type\": task_type, "
                               "\"index\": index}})",
                     "r": "make_tf_config <- function(cluster, task_type, index) {\n"
                          "  json$dumps(list(cluster = cluster, task = list(type = task_type, index = index)))\n"
                          "}"},
                    "not a list"),
    ),
    context={"python": "import json", "r": "json <- reticulate::import(\"json\")"},
)


# q2: who keeps the checkpoints and logs ------------------------------------------------------------------

def _keeps(cluster, task_type, index):
    """TensorFlow's own answer (multi_worker_util.is_chief), less the evaluator, the chief of its own cluster."""
    from tensorflow.python.distribute import multi_worker_util

    return multi_worker_util.is_chief(cluster, task_type, index) and task_type != "evaluator"


def _check_keeps_logs(answers, language):
    function = answers["keeps_logs"]
    for cluster in CLUSTERS:
        for task_type, hosts in cluster.items():
            for index in range(len(hosts)):
                got = call_answer(function, "keeps_logs", cluster, task_type, index)
                where = f"for {task_type} {index} of a cluster of {_cluster_words(cluster)}"
                if not isinstance(got, bool):
                    raise Incorrect(f"keeps_logs returned {language.value(got)} {where}: return "
                                    f"{language.true} or {language.false}.")
                expected = _keeps(cluster, task_type, index)
                if got == expected:
                    continue
                if task_type == "evaluator":
                    why = ("an evaluator trains nothing and keeps no checkpoints or logs of the training "
                           "(TensorFlow's is_chief says yes for it, the chief of its own cluster)")
                elif task_type == "worker" and index == 0:
                    why = ("with a chief in the cluster, the chief keeps them, not worker 0" if "chief" in cluster
                           else "without a chief in the cluster, worker 0 keeps the checkpoints and logs")
                elif task_type == "chief":
                    why = "the chief keeps the checkpoints and logs"
                else:
                    why = "only one task keeps them: the chief, or worker 0 without one"
                raise Incorrect(f"keeps_logs returned {language.value(got)} {where}, but {why}.")
    return ("one task keeps the checkpoints and logs in every cluster: the chief, or worker 0 without one, "
            "never the evaluator.")


q2 = Exercise(
    "05", "q2", "Who keeps the logs",
    answers=("keeps_logs",),
    check_answers=_check_keeps_logs,
    hints=("Look for a \"chief\" role in the cluster first: with one, it alone keeps them; without one, "
           "worker 0 does. An evaluator never does.",
           {"python": "if \"chief\" in cluster: return task_type == \"chief\"; otherwise return "
                      "task_type == \"worker\" and index == 0.",
            "r": "if (\"chief\" %in% names(cluster)) return(task_type == \"chief\"); otherwise "
                 "task_type == \"worker\" && index == 0."}),
    solutions={
        "python": "def keeps_logs(cluster, task_type, index):\n"
                  "    if \"chief\" in cluster:\n"
                  "        return task_type == \"chief\"\n"
                  "    return task_type == \"worker\" and index == 0",
        "r": "keeps_logs <- function(cluster, task_type, index) {\n"
             "  if (\"chief\" %in% names(cluster)) return(task_type == \"chief\")\n"
             "  task_type == \"worker\" && index == 0\n"
             "}",
    },
    starters={"python": "keeps_logs = None  # a function of (cluster, task_type, index) that returns True or False",
             "r": "keeps_logs <- NULL  # a function of (cluster, task_type, index) that returns TRUE or FALSE"},
    wrong=(
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    return index == 0",
                     "r": "keeps_logs <- function(cluster, task_type, index) index == 0"},
                    "not worker 0"),
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    return task_type == \"chief\"",
                     "r": "keeps_logs <- function(cluster, task_type, index) task_type == \"chief\""},
                    "without a chief in the cluster, worker 0 keeps"),
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    return task_type == \"chief\" or (\"chief\" not in cluster and index == 0)",
                     "r": "keeps_logs <- function(cluster, task_type, index) {\n"
                          "  task_type == \"chief\" || (!(\"chief\" %in% names(cluster)) && index == 0)\n"
                          "}"},
                    "an evaluator trains nothing"),
    ),
)


# q3: a cluster resolver without TF_CONFIG ----------------------------------------------------------------

def _check_make_resolver(answers, language):
    import tensorflow as tf

    function = answers["make_resolver"]
    for cluster, task_type, index in TASKS:
        before = os.environ.get("TF_CONFIG")
        try:
            resolver = call_answer(function, "make_resolver", cluster, task_type, index)
            changed = os.environ.get("TF_CONFIG") != before
        finally:  # whatever the answer did to TF_CONFIG is undone
            os.environ.pop("TF_CONFIG", None)
            if before is not None:
                os.environ["TF_CONFIG"] = before
        if changed or isinstance(resolver, tf.distribute.cluster_resolver.TFConfigClusterResolver):
            raise Incorrect("make_resolver went through TF_CONFIG, which this process may not own (a launcher, "
                            "a notebook): hold the cluster in a SimpleClusterResolver instead.")
        if not isinstance(resolver, tf.distribute.cluster_resolver.ClusterResolver):
            simple = language.pick("tf.distribute.cluster_resolver.SimpleClusterResolver(...)",
                                   "tf$distribute$cluster_resolver$SimpleClusterResolver(...)")
            raise Incorrect(f"make_resolver returned {type(resolver).__name__}, not a cluster resolver: "
                            f"return {simple}.")
        text = json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})
        reference = _resolver_reads(text)
        got = call_answer(lambda: (resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id),
                          "the resolver")
        if got[0] != reference[0]:
            empty = ("TFConfigClusterResolver reads TF_CONFIG only when asked, so without it the cluster is "
                     "empty: " if not got[0] else "")
            raise Incorrect(f"the resolver's cluster is {json.dumps(got[0])}, not the one you were given: {empty}"
                            "hold the cluster yourself in a SimpleClusterResolver of "
                            f"{language.pick('tf.train.ClusterSpec(cluster)', 'tf$train$ClusterSpec(cluster)')}"
                            f"{language.pick('', ' (in R, lapply(cluster, as.list) keeps a one-task role a list)')}.")
        if got[1:] != reference[1:]:
            raise Incorrect(f"the resolver says this task is {language.value(got[1])} {language.value(got[2])}, "
                            f"but TF_CONFIG would say {task_type} {index}: pass task_type and task_id.")
    return ("your resolver tells a strategy the same cluster and task as TensorFlow's TFConfigClusterResolver "
            "reading the same TF_CONFIG.")


q3 = Exercise(
    "05", "q3", "A resolver without TF_CONFIG",
    answers=("make_resolver",),
    check_answers=_check_make_resolver,
    hints=({"python": "tf.distribute.cluster_resolver.SimpleClusterResolver takes a tf.train.ClusterSpec and "
                      "the task's type and id.",
            "r": "tf$distribute$cluster_resolver$SimpleClusterResolver takes a tf$train$ClusterSpec and the "
                 "task's type and id; a role's tasks must reach Python as a list, even a single one."},
           {"python": "return tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster), "
                      "task_type=task_type, task_id=index)",
            "r": "tf$distribute$cluster_resolver$SimpleClusterResolver(tf$train$ClusterSpec(lapply(cluster, "
                 "as.list)), task_type = task_type, task_id = index)"}),
    solutions={
        "python": "def make_resolver(cluster, task_type, index):\n"
                  "    return tf.distribute.cluster_resolver.SimpleClusterResolver(\n"
                  "        tf.train.ClusterSpec(cluster), task_type=task_type, task_id=index)",
        "r": "make_resolver <- function(cluster, task_type, index) {\n"
             "  tf$distribute$cluster_resolver$SimpleClusterResolver(\n"
             "    tf$train$ClusterSpec(lapply(cluster, as.list)), task_type = task_type, task_id = index)\n"
             "}",
    },
    starters={"python": "make_resolver = None  # a function of (cluster, task_type, index)",
             "r": "make_resolver <- NULL  # a function of (cluster, task_type, index)"},
    wrong=(
        WrongAnswer({"python": "def make_resolver(cluster, task_type, index):\n"
                               "    return tf.distribute.cluster_resolver.SimpleClusterResolver("
                               "tf.train.ClusterSpec(cluster))",
                     "r": "make_resolver <- function(cluster, task_type, index) {\n"
                          "  tf$distribute$cluster_resolver$SimpleClusterResolver("
                          "tf$train$ClusterSpec(lapply(cluster, as.list)))\n"
                          "}"},
                    "pass task_type and task_id"),
        WrongAnswer({"python": "def make_resolver(cluster, task_type, index):\n"
                               "    return tf.train.ClusterSpec(cluster)",
                     "r": "make_resolver <- function(cluster, task_type, index) {\n"
                          "  tf$train$ClusterSpec(lapply(cluster, as.list))\n"
                          "}"},
                    "not a cluster resolver"),
    ),
    context=TF_CONTEXT,
    needs=("keras3",),
)
