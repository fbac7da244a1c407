package artifact

// TODO(compare.go): replace with CostOf and Compare once compare.go lands.
func pendingCostOf(rows []Result) CostSummary { return CostSummary{} }
