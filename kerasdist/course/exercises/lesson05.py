"""Lesson 05's checked exercises: a TF_CONFIG, who keeps the logs, a cluster resolver without TF_CONFIG.

Each check hands the student's answer to TensorFlow: the TF_CONFIG text to its
``TFConfigClusterResolver``, the roles to its ``multi_worker_util.is_chief`` (less the evaluator),
the resolver to the same questions a ``MultiWorkerMirroredStrategy`` asks. The clusters are the lesson's
and others (other sizes, hosts and orders of roles), made anew for every check, and what TensorFlow
says of each is worked out before the answer runs.

Example:
    >>> from kerasdist.course.exercises.lesson05 import q2
    >>> print(q2.verdict({"keeps_logs": lambda cluster, task_type, index: task_type == "chief"}))
    Incorrect: keeps_logs returned False for worker 0 of a cluster of 2 workers, but without a chief in the cluster, worker 0 keeps the checkpoints and logs.
"""

import json
import numbers
import os

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer, describe, scalar

TF_CONTEXT = {
    "python": "import tensorflow as tf",
    "r": 'library(tensorflow, exclude = c("shape", "set_random_seed"))\nlibrary(reticulate)',
}
def _clusters():
    """The check's clusters, new dicts at every call, so that no answer can change what the next check sees.

    The lesson's two workers with and without a chief and an evaluator, then other sizes on other hosts:
    a single worker, three, and a chief listed after the workers.
    """
    lesson = ["127.0.0.1:12345", "127.0.0.1:12346"]
    others = ["10.0.0.7:2222", "10.0.0.8:2222", "10.0.0.9:2222"]
    return [
        {"worker": list(lesson)},
        {"chief": ["127.0.0.1:12344"], "worker": list(lesson)},
        {"worker": list(lesson), "evaluator": ["127.0.0.1:12347"]},
        {"chief": ["127.0.0.1:12344"], "worker": list(lesson), "evaluator": ["127.0.0.1:12347"]},
        {"worker": list(others)},
        {"worker": others[:1], "evaluator": ["10.0.0.9:2223"]},
        {"worker": list(others), "chief": ["10.0.0.6:2222"]},
        {"evaluator": ["10.0.0.6:2223"], "chief": ["10.0.0.6:2222"], "worker": others[1:]},
    ]


# (cluster's number in _clusters(), task type, index) of the TF_CONFIG and resolver checks: every role,
# a single task among them, and tasks of clusters that are not the lesson's.
TASKS = ((0, "worker", 0), (0, "worker", 1), (1, "chief", 0), (3, "evaluator", 0), (4, "worker", 2),
         (5, "worker", 0), (6, "worker", 1), (7, "evaluator", 0))


def _tasks():
    """(cluster, task type, index) of each of TASKS, each cluster a new dict."""
    clusters = _clusters()
    return [(clusters[number], task_type, index) for number, task_type, index in TASKS]


def _cluster_words(cluster):
    """"a chief, 3 workers and an evaluator": the roles of ``cluster`` and how many tasks each has."""
    parts = [f"{'an' if role[0] in 'aeiou' else 'a'} {role}" if len(hosts) == 1 else f"{len(hosts)} {role}s"
             for role, hosts in cluster.items()]
    return " and ".join(parts) if len(parts) < 3 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _shown(cluster):
    """A cluster as JSON (or as Python prints it, where JSON cannot hold it), cut to 160 characters."""
    try:
        return json.dumps(cluster)[:160]
    except (TypeError, ValueError):
        return repr(cluster)[:160]


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

def _without_kerasdist_cluster(function, name):
    """Refuse a Python answer that calls kerasdist's own cluster code, which the task asks to write by hand."""
    code, names = getattr(function, "__code__", None), getattr(function, "__globals__", {})
    used = [names.get(word) for word in (code.co_names if code else ())]
    if any(getattr(value, "__module__", "").startswith("kerasdist.cluster")
           or getattr(value, "__name__", "").startswith("kerasdist.cluster") for value in used):
        raise Incorrect(f"{name} calls kerasdist.cluster, which this exercise asks you to write yourself: "
                        "build the answer from the cluster dict.")


def _check_make_tf_config(answers, language):
    function = answers["make_tf_config"]
    _without_kerasdist_cluster(function, "make_tf_config")
    dumps = language.pick("json.dumps()", "json$dumps()")
    as_list = language.pick("", " (in R, lapply(cluster, as.list) keeps a single task a list)")
    for cluster, task_type, index in _tasks():
        expected = json.loads(json.dumps(cluster))  # the check's own copy, made before the answer runs
        text = call_answer(function, "make_tf_config", cluster, task_type, index)
        call = f"make_tf_config(cluster, {language.value(task_type)}, {index})"
        if not isinstance(text, str):
            what = "a list" if language.name == "r" and isinstance(text, dict) else (
                language.none if text is None else describe(text))
            raise Incorrect(f"{call} returned {what}, not JSON text: TF_CONFIG is an environment variable, "
                            f"so write the {language.pick('dict', 'list')} with {dumps}.")
        try:
            parsed = json.loads(text)
        except ValueError:
            raise Incorrect(f"{call} returned {text[:60]!r}, which is not JSON: write it with "
                            f"{dumps}.") from None
        roles = parsed.get("cluster") if isinstance(parsed, dict) else None
        for role, tasks in roles.items() if isinstance(roles, dict) else ():
            if role not in expected:
                raise Incorrect(f"your TF_CONFIG's cluster has a role {language.value(role)} that the "
                                "cluster you were given does not have: write the task beside the cluster, "
                                "under the top-level key \"task\", and leave the cluster as it is.")
            if not isinstance(tasks, list):
                raise Incorrect(f"the tasks of {language.value(role)} are written as "
                                f"{json.dumps(tasks)[:60]}, not a list: TensorFlow wants a JSON list for "
                                f"every role, even of one task{as_list}.")
        reader = "TensorFlow's TFConfigClusterResolver"
        read_cluster, read_type, read_id = call_answer(_resolver_reads, reader, text)
        if read_cluster != expected:
            raise Incorrect(f"for {task_type} {index} of a cluster of {_cluster_words(expected)}, "
                            f"TensorFlow's resolver read the cluster {_shown(read_cluster)}, not the one you "
                            "were given: put the cluster argument itself under the key \"cluster\".")
        if (read_type, read_id) != (task_type, index):
            raise Incorrect(f"TensorFlow's resolver read the task as {language.value(read_type)} "
                            f"{language.value(read_id)}, but you were asked for {task_type} {index}: write "
                            "{\"type\": task_type, \"index\": index} under the key \"task\".")
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
        # Wrong type: the dict itself, not its JSON text.
        WrongAnswer({"python": "def make_tf_config(cluster, task_type, index):\n"
                               "    return {\"cluster\": cluster, \"task\": {\"type\": task_type, \"index\": index}}",
                     "r": "make_tf_config <- function(cluster, task_type, index) {\n"
                          "  list(cluster = lapply(cluster, as.list), task = list(type = task_type, index = index))\n"
                          "}"},
                    "not JSON text"),
        # Not what the task asks: no index.
        WrongAnswer({"python": "def make_tf_config(cluster, task_type, index):\n"
                               "    return json.dumps({\"cluster\": cluster, \"task\": {\"type\": task_type}})",
                     "r": "make_tf_config <- function(cluster, task_type, index) {\n"
                          "  json$dumps(list(cluster = lapply(cluster, as.list), task = list(type = task_type)))\n"
                          "}"},
                    "you were asked for worker 0"),
        # A role's tasks as one string (R: a role of one task becomes a string without as.list).
        WrongAnswer({"python": "def make_tf_config(cluster, task_type, index):\n"
                               "    tasks = {role: \",\".join(hosts) for role, hosts in cluster.items()}\n"
                               "    return json.dumps({\"cluster\": tasks, \"task\": {\"type\": task_type, "
                               "\"index\": index}})",
                     "r": "make_tf_config <- function(cluster, task_type, index) {\n"
                          "  json$dumps(list(cluster = cluster, task = list(type = task_type, index = index)))\n"
                          "}"},
                    "not a list"),
        # The lesson's hosts written in: right for the lesson's clusters only.
        WrongAnswer({"python": "def make_tf_config(cluster, task_type, index):\n"
                               "    lesson = {\"chief\": [\"127.0.0.1:12344\"], \"worker\": [\"127.0.0.1:12345\", "
                               "\"127.0.0.1:12346\"], \"evaluator\": [\"127.0.0.1:12347\"]}\n"
                               "    roles = {role: lesson[role] for role in cluster}\n"
                               "    return json.dumps({\"cluster\": roles, \"task\": {\"type\": task_type, "
                               "\"index\": index}})",
                     "r": "make_tf_config <- function(cluster, task_type, index) {\n"
                          "  lesson <- list(chief = list(\"127.0.0.1:12344\"), worker = list(\"127.0.0.1:12345\", "
                          "\"127.0.0.1:12346\"), evaluator = list(\"127.0.0.1:12347\"))\n"
                          "  json$dumps(list(cluster = lesson[names(cluster)], task = list(type = task_type, "
                          "index = index)))\n"
                          "}"},
                    "not the one you were given"),
        # The notebook's own cluster, not the argument (a misnamed parameter).
        WrongAnswer({"python": "cluster = {\"worker\": [\"127.0.0.1:12345\", \"127.0.0.1:12346\"]}\n"
                               "def make_tf_config(roles, task_type, index):\n"
                               "    return json.dumps({\"cluster\": cluster, \"task\": {\"type\": task_type, "
                               "\"index\": index}})",
                     "r": "cluster <- list(worker = c(\"127.0.0.1:12345\", \"127.0.0.1:12346\"))\n"
                          "make_tf_config <- function(roles, task_type, index) {\n"
                          "  json$dumps(list(cluster = lapply(cluster, as.list), "
                          "task = list(type = task_type, index = index)))\n"
                          "}"},
                    "not the one you were given"),
        # The task written into the cluster argument (changing the caller's dict, in Python).
        WrongAnswer({"python": "def make_tf_config(cluster, task_type, index):\n"
                               "    cluster[\"task\"] = {\"type\": task_type, \"index\": index}\n"
                               "    return json.dumps({\"cluster\": cluster})",
                     "r": "make_tf_config <- function(cluster, task_type, index) {\n"
                          "  cluster <- lapply(cluster, as.list)\n"
                          "  cluster$task <- list(type = task_type, index = index)\n"
                          "  json$dumps(list(cluster = cluster))\n"
                          "}"},
                    "that the cluster you were given does not have"),
    ),
    right=(
        {"python": "def make_tf_config(cluster, task_type, index):\n"
                   "    roles = {role: list(hosts) for role, hosts in cluster.items()}\n"
                   "    return json.dumps(dict(task=dict(index=int(index), type=str(task_type)), cluster=roles),\n"
                   "                      indent=2, sort_keys=True)",
         "r": "make_tf_config <- function(cluster, task_type, index) {\n"
              "  roles <- list()\n"
              "  for (role in names(cluster)) roles[[role]] <- as.list(cluster[[role]])\n"
              "  json$dumps(reticulate::dict(task = reticulate::dict(type = task_type, index = as.integer(index)),\n"
              "                              cluster = roles))\n"
              "}"},
        {"python": "def make_tf_config(cluster, task_type, index):\n"
                   "    return '{\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}}' % (\n"
                   "        json.dumps(cluster), task_type, index)",
         "r": "make_tf_config <- function(cluster, task_type, index) {\n"
              "  as.character(jsonlite::toJSON(list(cluster = lapply(cluster, I),\n"
              "                                     task = list(type = task_type, index = index)),\n"
              "                                auto_unbox = TRUE))\n"
              "}"},
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
    _without_kerasdist_cluster(function, "keeps_logs")
    for cluster in _clusters():
        for task_type, hosts in cluster.items():
            for index in range(len(hosts)):
                expected = _keeps(cluster, task_type, index)  # before the answer runs, on the check's dict
                got = call_answer(function, "keeps_logs", cluster, task_type, index)
                where = f"for {task_type} {index} of a cluster of {_cluster_words(cluster)}"
                value = scalar(got)
                if not isinstance(value, bool):
                    what = language.none if got is None else describe(got)
                    raise Incorrect(f"keeps_logs returned {what}, {where}: return {language.true} or "
                                    f"{language.false}, a {language.pick('bool', 'logical')}.")
                if value == expected:
                    continue
                if task_type == "evaluator":
                    why = ("an evaluator trains nothing and keeps no checkpoints or logs of the training "
                           "(TensorFlow's is_chief says yes for it, the chief of its own cluster)")
                elif task_type == "worker" and index == 0:
                    why = ("with a chief in the cluster, the chief keeps them, not worker 0"
                           if "chief" in cluster
                           else "without a chief in the cluster, worker 0 keeps the checkpoints and logs")
                elif task_type == "chief":
                    why = "the chief keeps the checkpoints and logs, wherever it is listed"
                else:
                    why = "only one task keeps them: the chief, or worker 0 without one"
                raise Incorrect(f"keeps_logs returned {language.value(value)} {where}, but {why}.")
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
        # Not what the task asks: any task 0.
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    return index == 0",
                     "r": "keeps_logs <- function(cluster, task_type, index) index == 0"},
                    "not worker 0"),
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    return task_type == \"chief\"",
                     "r": "keeps_logs <- function(cluster, task_type, index) task_type == \"chief\""},
                    "without a chief in the cluster, worker 0 keeps"),
        # Forgets the evaluator, and takes it out of the cluster it was given (in Python, the caller's dict).
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    cluster.pop(\"evaluator\", None)  # an evaluator does not train\n"
                               "    return task_type == \"chief\" or (\"chief\" not in cluster and index == 0)",
                     "r": "keeps_logs <- function(cluster, task_type, index) {\n"
                          "  cluster$evaluator <- NULL  # an evaluator does not train\n"
                          "  task_type == \"chief\" || (!(\"chief\" %in% names(cluster)) && index == 0)\n"
                          "}"},
                    "an evaluator trains nothing"),
        # The lesson's layout written in: worker 0 is at the lesson's first port.
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    if \"chief\" in cluster:\n"
                               "        return task_type == \"chief\"\n"
                               "    return cluster[task_type][index] == \"127.0.0.1:12345\"",
                     "r": "keeps_logs <- function(cluster, task_type, index) {\n"
                          "  if (\"chief\" %in% names(cluster)) return(task_type == \"chief\")\n"
                          "  cluster[[task_type]][[index + 1]] == \"127.0.0.1:12345\"\n"
                          "}"},
                    "without a chief in the cluster, worker 0 keeps"),
        # The lesson's order written in: the first role listed is the one that keeps them.
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    return task_type == next(iter(cluster)) and index == 0",
                     "r": "keeps_logs <- function(cluster, task_type, index) {\n"
                          "  task_type == names(cluster)[[1]] && index == 0\n"
                          "}"},
                    "with a chief in the cluster, the chief keeps them, not worker 0"),
        # Wrong type: text, not a bool.
        WrongAnswer({"python": "def keeps_logs(cluster, task_type, index):\n"
                               "    chief = \"chief\" if \"chief\" in cluster else \"worker\"\n"
                               "    return str(task_type == chief and index == 0)",
                     "r": "keeps_logs <- function(cluster, task_type, index) {\n"
                          "  chief <- if (\"chief\" %in% names(cluster)) \"chief\" else \"worker\"\n"
                          "  as.character(task_type == chief && index == 0)\n"
                          "}"},
                    "keeps_logs returned a str"),
    ),
    right=(
        # A NumPy bool.
        {"python": "import numpy as np\n"
                   "def keeps_logs(cluster, task_type, index):\n"
                   "    roles = np.array(list(cluster))\n"
                   "    keeper = \"chief\" if np.any(roles == \"chief\") else \"worker\"\n"
                   "    return np.logical_and(task_type == keeper, index == 0)",
         "r": "keeps_logs <- function(cluster, task_type, index) {\n"
              "  ifelse(\"chief\" %in% names(cluster), task_type == \"chief\", task_type == \"worker\" & index == 0)\n"
              "}"},
        {"python": "def keeps_logs(cluster, task_type, index):\n"
                   "    keeper = (\"chief\", 0) if \"chief\" in cluster else (\"worker\", 0)\n"
                   "    return (task_type, index) == keeper",
         "r": "keeps_logs <- function(cluster, task_type, index) {\n"
              "  keeper <- intersect(c(\"chief\", \"worker\"), names(cluster))[[1]]\n"
              "  identical(task_type, keeper) && identical(as.integer(index), 0L)\n"
              "}"},
    ),
)


# q3: a cluster resolver without TF_CONFIG ----------------------------------------------------------------

def _check_make_resolver(answers, language):
    import tensorflow as tf

    function = answers["make_resolver"]
    for cluster, task_type, index in _tasks():
        # TensorFlow's reading of the same task's TF_CONFIG, before the answer runs.
        task = {"type": task_type, "index": index}
        reference = _resolver_reads(json.dumps({"cluster": cluster, "task": task}))
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
            what = language.none if resolver is None else describe(resolver)
            raise Incorrect(f"make_resolver returned {what}, not a cluster resolver: "
                            f"return {simple}.")
        got = call_answer(lambda: (resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id),
                          "the resolver")
        if got[0] != reference[0]:
            empty = ("TFConfigClusterResolver reads TF_CONFIG only when asked, so without it the cluster is "
                     "empty: " if isinstance(got[0], dict) and not got[0] else "")
            spec = language.pick("tf.train.ClusterSpec(cluster)", "tf$train$ClusterSpec(cluster)")
            one_task = language.pick("", " (in R, lapply(cluster, as.list) keeps a one-task role a list)")
            raise Incorrect(f"for {task_type} {index} of a cluster of {_cluster_words(reference[0])}, the "
                            f"resolver's cluster is {_shown(got[0])}, not the one you were given: "
                            f"{empty}hold the cluster argument itself in a SimpleClusterResolver of "
                            f"{spec}{one_task}.")
        read_id = scalar(got[2])
        same_id = (isinstance(read_id, numbers.Real) and not isinstance(read_id, bool)
                   and read_id == reference[2])
        if not (isinstance(got[1], str) and got[1] == reference[1] and same_id):
            raise Incorrect(f"the resolver says this task is {language.value(got[1])} "
                            f"{language.value(read_id)}, but TF_CONFIG would say {task_type} {index}: pass "
                            "task_type and task_id.")
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
        # Not what the task asks: no task.
        WrongAnswer({"python": "def make_resolver(cluster, task_type, index):\n"
                               "    return tf.distribute.cluster_resolver.SimpleClusterResolver("
                               "tf.train.ClusterSpec(cluster))",
                     "r": "make_resolver <- function(cluster, task_type, index) {\n"
                          "  tf$distribute$cluster_resolver$SimpleClusterResolver("
                          "tf$train$ClusterSpec(lapply(cluster, as.list)))\n"
                          "}"},
                    "pass task_type and task_id"),
        # Wrong type: the ClusterSpec alone.
        WrongAnswer({"python": "def make_resolver(cluster, task_type, index):\n"
                               "    return tf.train.ClusterSpec(cluster)",
                     "r": "make_resolver <- function(cluster, task_type, index) {\n"
                          "  tf$train$ClusterSpec(lapply(cluster, as.list))\n"
                          "}"},
                    "not a cluster resolver"),
        # Through the process's shared TF_CONFIG.
        WrongAnswer({"python": "import json\n"
                               "import os\n"
                               "def make_resolver(cluster, task_type, index):\n"
                               "    os.environ[\"TF_CONFIG\"] = json.dumps({\"cluster\": cluster, "
                               "\"task\": {\"type\": task_type, \"index\": index}})\n"
                               "    return tf.distribute.cluster_resolver.TFConfigClusterResolver()",
                     "r": "make_resolver <- function(cluster, task_type, index) {\n"
                          "  json <- reticulate::import(\"json\")\n"
                          "  reticulate::import(\"os\")$environ$update(list(TF_CONFIG = json$dumps(list(\n"
                          "    cluster = lapply(cluster, as.list), task = list(type = task_type, index = index)))))\n"
                          "  tf$distribute$cluster_resolver$TFConfigClusterResolver()\n"
                          "}"},
                    "went through TF_CONFIG"),
        # The lesson's two workers written in.
        WrongAnswer({"python": "def make_resolver(cluster, task_type, index):\n"
                               "    lesson = {\"worker\": [\"127.0.0.1:12345\", \"127.0.0.1:12346\"]}\n"
                               "    return tf.distribute.cluster_resolver.SimpleClusterResolver(\n"
                               "        tf.train.ClusterSpec(lesson), task_type=task_type, task_id=index)",
                     "r": "make_resolver <- function(cluster, task_type, index) {\n"
                          "  lesson <- list(worker = list(\"127.0.0.1:12345\", \"127.0.0.1:12346\"))\n"
                          "  tf$distribute$cluster_resolver$SimpleClusterResolver(\n"
                          "    tf$train$ClusterSpec(lesson), task_type = task_type, task_id = index)\n"
                          "}"},
                    "not the one you were given"),
        # A role of one task written as a string (R: what the cluster becomes without as.list).
        WrongAnswer({"python": "def make_resolver(cluster, task_type, index):\n"
                               "    roles = {role: hosts[0] if len(hosts) == 1 else hosts for role, hosts in "
                               "cluster.items()}\n"
                               "    return tf.distribute.cluster_resolver.SimpleClusterResolver(\n"
                               "        tf.train.ClusterSpec(roles), task_type=task_type, task_id=index)",
                     "r": "make_resolver <- function(cluster, task_type, index) {\n"
                          "  tf$distribute$cluster_resolver$SimpleClusterResolver(\n"
                          "    tf$train$ClusterSpec(cluster), task_type = task_type, task_id = index)\n"
                          "}"},
                    "must be a list"),
    ),
    right=(
        {"python": "def make_resolver(cluster, task_type, index):\n"
                   "    spec = tf.train.ClusterSpec({role: dict(enumerate(hosts)) for role, hosts in cluster.items()})\n"
                   "    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec)\n"
                   "    resolver.task_type, resolver.task_id = task_type, index\n"
                   "    return resolver",
         "r": "make_resolver <- function(cluster, task_type, index) {\n"
              "  roles <- list()\n"
              "  for (role in names(cluster)) roles[[role]] <- as.list(cluster[[role]])\n"
              "  resolver <- tf$distribute$cluster_resolver$SimpleClusterResolver(tf$train$ClusterSpec(roles))\n"
              "  resolver$task_type <- task_type\n"
              "  resolver$task_id <- index\n"
              "  resolver\n"
              "}"},
        {"python": "from tensorflow.python.distribute.cluster_resolver import SimpleClusterResolver\n"
                   "def make_resolver(cluster, task_type, index):\n"
                   "    spec = tf.train.ClusterSpec(tf.train.ClusterSpec(cluster).as_cluster_def())\n"
                   "    return SimpleClusterResolver(spec, task_type=task_type, task_id=index)",
         "r": "make_resolver <- function(cluster, task_type, index) {\n"
              "  spec <- tf$train$ClusterSpec(reticulate::dict(lapply(cluster, function(hosts) as.list(hosts))))\n"
              "  tf$distribute$cluster_resolver$SimpleClusterResolver(spec, task_type = task_type,\n"
              "                                                       task_id = as.numeric(index))\n"
              "}"},
    ),
    context=TF_CONTEXT,
    needs=("keras3",),
)
