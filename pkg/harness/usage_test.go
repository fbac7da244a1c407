package harness

import (
	"testing"
)

// TestUsageFromMetricsLeavesUnreportedNull: metrics.json with only
// inputTokens gives a Usage event whose completion tokens and calls are
// unreported (nil), not 0; a reported 0 stays 0.
func TestUsageFromMetricsLeavesUnreportedNull(t *testing.T) {
	m, err := ReadMetrics([]byte(`{"inputTokens": 812, "provider": "p"}`))
	if err != nil {
		t.Fatal(err)
	}
	u, ok := UsageFromMetrics(m)
	if !ok || u.PromptTokens == nil || *u.PromptTokens != 812 || u.CompletionTokens != nil || u.Calls != nil ||
		u.CacheReadTokens != nil || u.CacheWriteTokens != nil || u.CostUSD != nil {
		t.Errorf("usage from inputTokens only: %+v", u)
	}
	m, _ = ReadMetrics([]byte(`{"outputTokens": 0, "llmCallCount": 0}`))
	if u, ok := UsageFromMetrics(m); !ok || u.PromptTokens != nil || u.CompletionTokens == nil || *u.CompletionTokens != 0 || u.Calls == nil || *u.Calls != 0 {
		t.Errorf("usage from reported zeros: %+v", u)
	}
	m, _ = ReadMetrics([]byte(`{"toolCallCount": 3}`))
	if _, ok := UsageFromMetrics(m); ok {
		t.Error("metrics.json without token counts gave a Usage event")
	}
}
