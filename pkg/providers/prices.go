package providers

import (
	_ "embed"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2"
)

//go:embed prices.toml
var pricesTOML []byte

// Price is one model's price, US dollars per million tokens.
type Price struct {
	Provider   string   `toml:"provider"`
	Names      []string `toml:"names"`
	Input      float64  `toml:"input"`
	Output     float64  `toml:"output"`
	CacheRead  float64  `toml:"cache_read"`
	CacheWrite float64  `toml:"cache_write"`
}

// PriceTable is the pinned price table: its date (YYYY-MM-DD, when the
// prices were taken), its source, and the prices.
type PriceTable struct {
	Date   string  `toml:"date"`
	Source string  `toml:"source"`
	Models []Price `toml:"model"`

	byName map[string]Price
}

var (
	pricesOnce sync.Once
	prices     *PriceTable
	pricesErr  error
)

// Prices returns the table embedded from prices.toml. It panics when the
// file does not parse or a model is listed twice: the table is part of
// the binary, and TestPriceTable keeps it valid.
func Prices() *PriceTable {
	pricesOnce.Do(func() { prices, pricesErr = ParsePrices(pricesTOML) })
	if pricesErr != nil {
		panic(pricesErr)
	}
	return prices
}

// ParsePrices reads a price table: unknown keys, a missing date or
// source, a model without names, a negative price or a name listed twice
// are errors.
func ParsePrices(b []byte) (*PriceTable, error) {
	var t PriceTable
	dec := toml.NewDecoder(strings.NewReader(string(b))).DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("price table: %w", err)
	}
	if !regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`).MatchString(t.Date) || strings.TrimSpace(t.Source) == "" {
		return nil, fmt.Errorf("price table: date (YYYY-MM-DD) and source are required")
	}
	t.byName = map[string]Price{}
	for i, m := range t.Models {
		if len(m.Names) == 0 {
			return nil, fmt.Errorf("price table: model %d has no names", i+1)
		}
		for _, v := range []float64{m.Input, m.Output, m.CacheRead, m.CacheWrite} {
			if v < 0 || math.IsNaN(v) {
				return nil, fmt.Errorf("price table: %s: a negative price", m.Names[0])
			}
		}
		for _, n := range m.Names {
			n = strings.ToLower(n)
			if _, dup := t.byName[n]; dup {
				return nil, fmt.Errorf("price table: %s is listed twice", n)
			}
			t.byName[n] = m
		}
	}
	return &t, nil
}

// dated matches the snapshot suffixes a model name may carry:
// -20250929, -2024-08-06, @20250929, and a trailing -latest.
var dated = regexp.MustCompile(`(-\d{8}|-\d{4}-\d{2}-\d{2}|@\d{8}|-latest)$`)

// bedrockID matches Amazon Bedrock's id of an Anthropic model: an
// optional cross-region inference profile prefix (us., eu., apac.,
// global., jp., us-gov., ...), "anthropic.", the Anthropic model name,
// and Bedrock's version suffix (-v1:0, -v2:0, -v1) with an optional
// context-window variant (:200k). Its first group is the Anthropic name,
// which may still carry a dated suffix (claude-sonnet-4-5-20250929).
var bedrockID = regexp.MustCompile(`^(?:[a-z]{2,6}(?:-[a-z]+)?\.)?anthropic\.(claude-[a-z0-9.-]+?)(?:-v\d+(?::\d+)?)?(?::\d+k)?$`)

// anthropicName returns the Anthropic model a Bedrock model id or a
// Bedrock ARN of a foundation model or a system inference profile
// (arn:aws:bedrock:REGION:ACCOUNT:inference-profile/us.anthropic.…)
// names, and true; or m and false. An application inference profile's
// ARN names no model and is not matched.
func anthropicName(m string) (string, bool) {
	if strings.HasPrefix(m, "arn:") {
		i := strings.LastIndexByte(m, '/')
		if i < 0 {
			return m, false
		}
		m = m[i+1:]
	}
	if s := bedrockID.FindStringSubmatch(m); s != nil {
		return s[1], true
	}
	return m, false
}

// Lookup returns the price of model: its name as listed, or without a
// "models/" prefix or a dated snapshot suffix. A Bedrock id of an
// Anthropic model (anthropic.claude-sonnet-4-5-20250929-v1:0, with or
// without a region prefix such as us. or global., or in an ARN) is priced
// as the Anthropic model it names.
func (t *PriceTable) Lookup(model string) (Price, bool) {
	m := strings.ToLower(strings.TrimSpace(model))
	m = strings.TrimPrefix(m, "models/")
	m, _ = anthropicName(m)
	if p, ok := t.byName[m]; ok {
		return p, true
	}
	if s := dated.ReplaceAllString(m, ""); s != m {
		p, ok := t.byName[s]
		return p, ok
	}
	return Price{}, false
}

// Tokens are one call's token counts by kind. Input excludes cached
// input (Anthropic's convention: OpenAI's and Gemini's cached tokens are
// moved to CacheRead); Output includes reasoning and thinking tokens.
type Tokens struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Cost prices tokens of model: US dollars, and "" as the reason; or nil
// and the reason there is no price (no model named, a model not in the
// table).
func (t *PriceTable) Cost(model string, n Tokens) (*float64, string) {
	if strings.TrimSpace(model) == "" {
		return nil, "no model named in the call"
	}
	p, ok := t.Lookup(model)
	if !ok {
		return nil, fmt.Sprintf("model %q is not in the price table of %s", model, t.Date)
	}
	usd := (float64(n.Input)*p.Input + float64(n.Output)*p.Output +
		float64(n.CacheRead)*p.CacheRead + float64(n.CacheWrite)*p.CacheWrite) / 1e6
	usd = math.Round(usd*1e9) / 1e9
	return &usd, ""
}
