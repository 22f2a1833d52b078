package recipes

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// schemaKeys lists every leaf key of t: the full dotted path and the path
// relative to the nearest Model, Engine or Resources section, which
// SCHEMA.md documents once for all their uses.
func schemaKeys(t reflect.Type, full, rel string, out map[string]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		out[full] = rel
		return
	}
	switch t {
	case reflect.TypeOf(Model{}), reflect.TypeOf(Engine{}), reflect.TypeOf(Resources{}):
		rel = ""
	}
	keys, index := fieldsOf(t)
	for _, k := range keys {
		ft := t.Field(index[k]).Type
		r := k
		if rel != "" {
			r = rel + "." + k
		}
		schemaKeys(ft, join(full, k), r, out)
	}
}

// Every key of the schema is documented in SCHEMA.md.
func TestSchemaDocumented(t *testing.T) {
	doc, err := os.ReadFile("SCHEMA.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	schemaKeys(reflect.TypeOf(Recipe{}), "", "", keys)
	if len(keys) < 100 {
		t.Fatalf("only %d keys found; the walk is broken", len(keys))
	}
	for full, rel := range keys {
		if !strings.Contains(string(doc), "`"+full+"`") && !strings.Contains(string(doc), "`"+rel+"`") &&
			!strings.Contains(string(doc), "`."+rel+"`") {
			t.Errorf("SCHEMA.md does not document %s", full)
		}
	}
}

// Every field of the schema has a type the decoder and the resolved-recipe
// writer handle: encoding Default() with every optional section present
// must not panic, and must load back.
func TestSchemaTypesSupported(t *testing.T) {
	r := Default()
	r.Models.Policy.Init = &ModelInit{}
	r.Models.Policy.Init.setDefaults()
	r.Models.Policy.LoRA = &LoRA{}
	r.Models.Policy.LoRA.setDefaults()
	r.Engines.Feedback = &Engine{VLLM: &VLLM{Servers: []string{"http://h:1"}}}
	r.Data.Task = &Task{}
	r.Data.Dataset = &Dataset{}
	r.Placement.Rollout.Custom = map[string]float64{"tpu": 1}
	l := &Loaded{Recipe: r, Source: "x"}
	var b strings.Builder
	if err := l.WriteResolved(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("x", []byte(b.String()), "", nil); err == nil {
		t.Fatal("this recipe is contradictory (task and dataset both set) and must not load")
	} else if strings.Contains(err.Error(), "unsupported") || strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("the schema writes what it cannot read:\n%v", err)
	}
}
