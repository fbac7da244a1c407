# Writes the answer the task asks for.
open("/app/answer.txt", "w").write("%d\n" % sum(range(1, 101)))
