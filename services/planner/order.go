package planner

// dispatchOrder returns the order in which cells' launch jobs are queued:
// round-robin over tasks (the first cell of each task, in plan order, then
// the second of each, ...), so the first jobs a node takes cover every
// task and the builds of different task images start together instead of
// one after the other; a cell never waits behind another task's build.
// The cells are not changed; the plan's own order (events, artifact rows)
// stays task-major.
func dispatchOrder(cells []Cell) []Cell {
	var tasks []string
	byTask := map[string][]Cell{}
	for _, c := range cells {
		if _, ok := byTask[c.Task.Name]; !ok {
			tasks = append(tasks, c.Task.Name)
		}
		byTask[c.Task.Name] = append(byTask[c.Task.Name], c)
	}
	out := make([]Cell, 0, len(cells))
	for i := 0; len(out) < len(cells); i++ {
		for _, t := range tasks {
			if i < len(byTask[t]) {
				out = append(out, byTask[t][i])
			}
		}
	}
	return out
}
