package main

// Tabulating JSON records from several runs: records with the same
// identity (their non-numeric fields, plus numeric ones named as
// identity) are one row; each numeric field becomes a min/median/max
// cell.

import (
	"slices"
	"strings"
)

type recordGroups struct {
	idKeys, numKeys []string
	order           []string            // group keys in first-seen order
	ids             map[string][]string // group key -> identity values
	vals            map[string]map[string]runs
	// ratioKey/ratioAnchor: when set, rows() adds, for every group whose
	// ratioKey differs from ratioAnchor, a row dividing its medians by
	// those of the matching anchor group.
	ratioKey, ratioAnchor string
}

// groupRecords groups recs; idFirst and numFirst put those fields first
// (idFirst's numeric fields count as identity).
func groupRecords(recs []jsonRecord, idFirst, numFirst []string) *recordGroups {
	g := &recordGroups{ids: map[string][]string{}, vals: map[string]map[string]runs{}}
	isID := map[string]bool{}
	for _, k := range idFirst {
		isID[k] = true
	}
	var idRest, numRest []string
	for _, r := range recs {
		for k, v := range r {
			if k == "test" || slices.Contains(idFirst, k) || slices.Contains(numFirst, k) || slices.Contains(idRest, k) || slices.Contains(numRest, k) {
				continue
			}
			if _, num := v.(float64); num {
				numRest = append(numRest, k)
			} else {
				idRest = append(idRest, k)
				isID[k] = true
			}
		}
	}
	slices.Sort(idRest)
	slices.Sort(numRest)
	present := func(keys []string) []string {
		var out []string
		for _, k := range keys {
			for _, r := range recs {
				if _, ok := r[k]; ok {
					out = append(out, k)
					break
				}
			}
		}
		return out
	}
	g.idKeys = append(present(idFirst), idRest...)
	g.numKeys = append(present(numFirst), numRest...)
	for _, r := range recs {
		var id []string
		for _, k := range g.idKeys {
			id = append(id, r.str(k))
		}
		key := strings.Join(id, "\x00")
		if _, ok := g.ids[key]; !ok {
			g.ids[key] = id
			g.order = append(g.order, key)
			g.vals[key] = map[string]runs{}
		}
		for _, k := range g.numKeys {
			if v, ok := r.num(k); ok {
				g.vals[key][k] = append(g.vals[key][k], v)
			}
		}
	}
	return g
}

func (g *recordGroups) header() []string {
	return append(slices.Clone(g.idKeys), g.numKeys...)
}

func (g *recordGroups) rows() [][]string {
	var out [][]string
	for _, key := range g.order {
		row := slices.Clone(g.ids[key])
		for _, k := range g.numKeys {
			row = append(row, g.vals[key][k].cell(sig3))
		}
		out = append(out, row)
	}
	ri := slices.Index(g.idKeys, g.ratioKey)
	if ri < 0 {
		return out
	}
	for _, key := range g.order {
		id := g.ids[key]
		if id[ri] == g.ratioAnchor {
			continue
		}
		anchor := slices.Clone(id)
		anchor[ri] = g.ratioAnchor
		av, ok := g.vals[strings.Join(anchor, "\x00")]
		if !ok {
			continue
		}
		row := slices.Clone(id)
		row[ri] = id[ri] + " ÷ " + g.ratioAnchor
		for _, k := range g.numKeys {
			row = append(row, ratioOfMedians(g.vals[key][k], av[k]).cell(times))
		}
		out = append(out, row)
	}
	return out
}
