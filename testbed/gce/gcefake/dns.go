package gcefake

import (
	"strconv"
	"strings"
	"time"
)

type managedZone struct {
	dnsName string
	rrsets  map[string]map[string]any // name+" "+type → rrset
	changes map[string]map[string]any
	next    int
}

// AddManagedZone creates a Cloud DNS managed zone (dnsName ends with a dot).
func (s *Server) AddManagedZone(name, dnsName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.zones[name] = &managedZone{dnsName: dnsName, rrsets: map[string]map[string]any{}, changes: map[string]map[string]any{}}
}

// Records returns the rrdatas of name's record of type typ in zone.
func (s *Server) Records(zone, name, typ string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	z := s.zones[zone]
	if z == nil {
		return nil
	}
	var out []string
	for _, d := range list(z.rrsets[name+" "+typ], "rrdatas") {
		out = append(out, d.(string))
	}
	return out
}

func (s *Server) dispatchDNS(r *request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	z := s.zones[r.params["managedZone"]]
	if z == nil {
		return nil, errf(404, "notFound", "The 'parameters.managedZone' resource named '%s' does not exist.", r.params["managedZone"])
	}
	switch r.method {
	case "dns.resourceRecordSets.list":
		var items []any
		for _, rr := range z.rrsets {
			if n := r.query.Get("name"); n != "" && str(rr, "name") != n {
				continue
			}
			if t := r.query.Get("type"); t != "" && str(rr, "type") != t {
				continue
			}
			items = append(items, deepCopy(rr))
		}
		return map[string]any{"kind": "dns#resourceRecordSetsListResponse", "rrsets": items}, nil
	case "dns.changes.get":
		c, ok := z.changes[r.params["changeId"]]
		if !ok {
			return nil, errf(404, "notFound", "The 'parameters.changeId' resource named '%s' does not exist.", r.params["changeId"])
		}
		return deepCopy(c), nil
	case "dns.changes.create":
		return s.createChange(r, z)
	}
	return nil, errf(501, "notImplemented", "%s is not implemented by the fake", r.method)
}

func (s *Server) createChange(r *request, z *managedZone) (any, *apiError) {
	dels, adds := list(r.body, "deletions"), list(r.body, "additions")
	if len(dels)+len(adds) == 0 {
		return nil, errf(400, "required", "The 'entity.change' resource has no additions or deletions.")
	}
	gone := map[string]bool{}
	for i, d := range dels {
		d := obj(d)
		key := str(d, "name") + " " + str(d, "type")
		cur, ok := z.rrsets[key]
		if !ok {
			return nil, errf(404, "notFound", "The 'entity.change.deletions[%d]' resource named '%s' does not exist.", i, key)
		}
		if !sameRRSet(cur, d) {
			return nil, errf(412, "conditionNotMet", "The 'entity.change.deletions[%d]' resource named '%s' does not match the existing record set.", i, key)
		}
		gone[key] = true
	}
	for i, a := range adds {
		a := obj(a)
		name := str(a, "name")
		if !strings.HasSuffix(name, z.dnsName) {
			return nil, errf(400, "invalid", "The 'entity.change.additions[%d].name' %q is not in zone %s", i, name, z.dnsName)
		}
		key := name + " " + str(a, "type")
		if _, ok := z.rrsets[key]; ok && !gone[key] {
			return nil, errf(409, "alreadyExists", "The 'entity.change.additions[%d]' resource named '%s' already exists", i, key)
		}
	}
	z.next++
	id := strconv.Itoa(z.next)
	c := deepCopy(r.body).(map[string]any)
	c["id"] = id
	c["kind"] = "dns#change"
	c["status"] = "pending"
	c["startTime"] = time.Now().Format(time.RFC3339Nano)
	z.changes[id] = c
	lat := s.latency(r.method)
	start := time.Now()
	s.after(lat, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for key := range gone {
			delete(z.rrsets, key)
		}
		for _, a := range adds {
			a := deepCopy(a).(map[string]any)
			a["kind"] = "dns#resourceRecordSet"
			z.rrsets[str(a, "name")+" "+str(a, "type")] = a
		}
		c["status"] = "done"
		s.opStats = append(s.opStats, OpStat{Method: "dns.changes.create", Start: start, End: time.Now()})
	})
	return deepCopy(c), nil
}

func sameRRSet(a, b map[string]any) bool {
	if ta, tb := a["ttl"], b["ttl"]; tb != nil && ta != tb {
		return false
	}
	da, db := list(a, "rrdatas"), list(b, "rrdatas")
	if len(da) != len(db) {
		return false
	}
	for i := range da {
		if da[i] != db[i] {
			return false
		}
	}
	return true
}
