"""`labctl grade`: a class of learners graded in one batch.

`layout` checks each learner's folder, `rubric` says what earns points,
`task` observes one learner (the only part that runs learner code, through
the isolation layer), `worker` and `pool` run observations in long-lived
local processes, `dask_exec` on a Dask cluster, `score` turns facts into
points in the batch's own process, `runner` holds the batch together
(resume, the reference cache), `outputs` writes the gradebook, JUnit,
Gradescope and feedback files, `similarity` compares clean rooms, and
`bundle` writes a Gradescope autograder.
"""
