package artifact

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AgentClaim is results[].agent_claim: the agent's own final word on its
// work, kept beside the verifier's verdict. Text is the last ClaimTextBytes
// of the agent's final message (the Claude CLI's result text, or an
// agent's response: the end of its stdout text, or its last message
// event); ClaimedSuccess is ClaimsSuccess(Text), false whenever the agent
// itself reported a failed end (a Claude result whose subtype is not
// "success" or whose is_error is true).
type AgentClaim struct {
	Text           string `json:"text"`
	ClaimedSuccess bool   `json:"claimed_success"`
}

// ClaimTextBytes bounds AgentClaim.Text (its last bytes are kept, on a
// rune boundary): the end of a final message is where the claim is.
const ClaimTextBytes = 4096

// NewAgentClaim returns the claim of a cell whose agent's final message is
// text and whose metrics.agent_reported is reported: nil when text is
// blank. Text keeps the last ClaimTextBytes of text. ClaimedSuccess is
// ClaimsSuccess(text), except that a run the agent reported as failed
// never claims success: reported["subtype"] present and not "success" (the
// Claude CLI's error_max_turns, error_during_execution), or
// reported["is_error"] true.
func NewAgentClaim(text string, reported map[string]any) *AgentClaim {
	text = ClaimText(text)
	if text == "" {
		return nil
	}
	c := &AgentClaim{Text: text, ClaimedSuccess: ClaimsSuccess(text)}
	if st, ok := reported["subtype"]; ok && st != "success" {
		c.ClaimedSuccess = false
	}
	if reported["is_error"] == true {
		c.ClaimedSuccess = false
	}
	return c
}

// ClaimText is the part of an agent's final message a claim keeps: its
// last ClaimTextBytes bytes, cut on a rune boundary, without the blank
// space around it. The result shares no memory with text.
func ClaimText(text string) string {
	text = strings.TrimSpace(text)
	if len(text) > ClaimTextBytes {
		cut := len(text) - ClaimTextBytes
		for cut < len(text) && !utf8.RuneStart(text[cut]) {
			cut++
		}
		text = strings.TrimSpace(text[cut:])
	}
	return strings.Clone(text)
}

// Overclaimed reports whether the row's agent claimed success
// (AgentClaim.ClaimedSuccess) while the verifier scored the cell below 1:
// a scored row (not Errored) with a reward under 1. A cell without a
// verdict, or without a claim, is never overclaimed. The report and the
// viewer flag such a cell with ⚠️.
func (r Result) Overclaimed() bool {
	return r.AgentClaim != nil && r.AgentClaim.ClaimedSuccess && !r.Errored() && r.Reward != nil && *r.Reward < 1
}

// Words of the claim rule (ClaimsSuccess), lower case.
var (
	// claimWords claim that the work is finished.
	claimWords = map[string]bool{"solved": true, "completed": true, "complete": true, "fixed": true, "done": true, "successfully": true}
	// hedgeWords make a claim word after them in the same sentence
	// something other than an affirmation: a negation, a condition, an
	// intention or a qualification.
	hedgeWords = map[string]bool{
		"not": true, "no": true, "never": true, "none": true, "nothing": true, "nor": true, "cannot": true,
		"without": true, "unable": true, "if": true, "unless": true, "until": true, "once": true, "when": true,
		"whether": true, "before": true, "should": true, "would": true, "could": true, "might": true,
		"may": true, "must": true, "will": true, "need": true, "needs": true, "try": true, "trying": true,
		"partially": true, "partly": true, "almost": true, "nearly": true, "mostly": true,
	}
	// failWords anywhere in a sentence make it a report of a failure.
	failWords = map[string]bool{"fail": true, "fails": true, "failed": true, "failing": true, "failure": true, "failures": true}
)

// ClaimsSuccess reports whether text, an agent's final message, claims
// that the task is solved. The rule, applied sentence by sentence (a
// sentence ends at . ! ? ; or a line break; case is ignored; ’ is read as
// '):
//
//   - a sentence ending with ? is a question and claims nothing;
//   - a sentence claims completion when it holds, as a whole word, one of
//     "solved", "completed", "complete", "fixed", "done", "successfully",
//     or the phrase "all tests pass" (also "all the tests", "all N tests",
//     "… now pass", "… are passing", "… passed", "… succeed(ed)");
//   - unless a word before it in the sentence hedges it: a negation (not,
//     no, never, none, nothing, nor, cannot, without, unable, any word
//     ending in n't), a condition or time clause (if, unless, until, once,
//     when, whether, before), an intention or modal (should, would,
//     could, might, may, must, will, need(s), try, trying) or a
//     qualification (partially, partly, almost, nearly, mostly), or "to"
//     among the three words before it ("to complete", "to be fixed",
//     "to get it done");
//   - and unless the sentence mentions a failure anywhere (fail, fails,
//     failed, failing, failure, failures).
//
// The text claims success when at least one sentence does. The rule
// errs towards not flagging: "I fixed the failing test" and "When I ran
// them, all tests passed" claim nothing by it, while "Done with fix-sum"
// does. It reads English only and knows no sarcasm or quotation.
func ClaimsSuccess(text string) bool {
	text = strings.ReplaceAll(strings.ToLower(text), "’", "'")
	for len(text) > 0 {
		i := strings.IndexAny(text, ".!?;\n\r")
		sentence, question := text, false
		if i >= 0 {
			sentence, question = text[:i], text[i] == '?'
			text = text[i+1:]
		} else {
			text = ""
		}
		if !question && sentenceClaims(words(sentence)) {
			return true
		}
	}
	return false
}

// words splits a sentence into words: runs of letters, digits and
// apostrophes.
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
	})
}

func sentenceClaims(ws []string) bool {
	for _, w := range ws {
		if failWords[w] {
			return false
		}
	}
	for i, w := range ws {
		if hedgeWords[w] || strings.HasSuffix(w, "n't") {
			return false // every claim word after it is hedged
		}
		if (claimWords[w] || allTestsPass(ws[i:])) && !slices.Contains(ws[max(0, i-3):i], "to") {
			return true
		}
	}
	return false
}

// allTestsPass reports whether ws starts with "all [the|N] tests [now]
// [are|have] pass|passed|passing|succeed|succeeded".
func allTestsPass(ws []string) bool {
	if len(ws) == 0 || ws[0] != "all" {
		return false
	}
	ws = ws[1:]
	if len(ws) > 0 && (ws[0] == "the" || isNumber(ws[0])) {
		ws = ws[1:]
	}
	if len(ws) == 0 || ws[0] != "tests" {
		return false
	}
	ws = ws[1:]
	for len(ws) > 0 && (ws[0] == "now" || ws[0] == "are" || ws[0] == "have") {
		ws = ws[1:]
	}
	if len(ws) == 0 {
		return false
	}
	switch ws[0] {
	case "pass", "passed", "passing", "succeed", "succeeded":
		return true
	}
	return false
}

func isNumber(w string) bool {
	for _, r := range w {
		if !unicode.IsDigit(r) {
			return false
		}
	}
	return w != ""
}
