"""A job's run across the three queues, in modules whose imports go one way:

    webapp.jobs.tasks (the Celery tasks, thin)
      -> runner   the agent worker: one job's agent loop, its turns stored, cancel, resume
           -> sender    the loop's evaluator: builds and evaluations sent to the other queues
      -> worker   the compile and gpu workers: the sandbox called directly, abandoned work
    each of them -> progress (the words of a step, how progress travels), outcomes (results
    the web app makes without the sandbox), webapp.jobs.services (writes viewers see)

Nothing here imports webapp.jobs.tasks, and neither of sender and worker imports the other.

One result conversion: a worker sends the sandbox's result as its JSON form (`to_dict()` once);
the sender hands that dict to the loop as it came; the loop's tools rebuild the dataclass once
and store the dict in the event (agent.tools.eval_result_and_dict).

One progress path: a gpu worker reports the sandbox's progress ("correctness", {"trial": 3,
"of": 5}) under its task's progress key in Redis; the sender, which polls the task anyway,
hands it to the loop's on_progress, and the runner's callback writes the job's step (services.set_step, only
while the attempt that asked runs the job). The gpu worker writes nothing of the job.
"""
