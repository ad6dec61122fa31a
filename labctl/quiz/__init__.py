"""The chapters' self-check and closed-book questions, checked against the labs' own code.

`bank` holds the questions, section by section (逐部件讲透 §6.13's acceptance list,
第8章's 自查清单 and 闭卷题, 手撕 §13.1, §13.3 and §13.5); each checkable one
carries a `solve` that computes its answer with the labs' code and the PyTorch
reference, never a typed key. `check` reads a learner's answers (typed, or from
a file) and grades each against that value with the rounding the question asks
for; `record` keeps the graded answers as a record a grader can collect. A
question whose answer is prose grades nothing: it shows what a right answer
must contain and the lab that demonstrates it.
"""
