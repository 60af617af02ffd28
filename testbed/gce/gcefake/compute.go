package gcefake

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// scopeOf is "zones/Z", "regions/R" or "global" from a request's
// parameters.
func scopeOf(r *request) string {
	if z := r.params["zone"]; z != "" {
		return "zones/" + z
	}
	if rg := r.params["region"]; rg != "" {
		return "regions/" + rg
	}
	return "global"
}

// nameRE is Compute's resource name rule (RFC 1035 label, 1-63
// characters), as the API states it in its 400 "invalid" errors.
var nameRE = regexp.MustCompile(`^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$`)

// collections per method family: the path collection and its list kind.
var families = map[string][2]string{
	"instances": {"instances", "compute#instanceList"}, "disks": {"disks", "compute#diskList"},
	"addresses": {"addresses", "compute#addressList"}, "regionHealthChecks": {"healthChecks", "compute#healthCheckList"},
	"instanceGroups": {"instanceGroups", "compute#instanceGroupList"}, "regionBackendServices": {"backendServices", "compute#backendServiceList"},
	"forwardingRules": {"forwardingRules", "compute#forwardingRuleList"}, "firewalls": {"firewalls", "compute#firewallList"},
}

// nameParam is the path parameter naming the resource of each family.
var nameParam = map[string]string{
	"instances": "instance", "disks": "disk", "addresses": "address", "regionHealthChecks": "healthCheck",
	"instanceGroups": "instanceGroup", "regionBackendServices": "backendService", "forwardingRules": "forwardingRule",
	"firewalls": "firewall",
}

func (s *Server) dispatchCompute(ctx context.Context, r *request) (any, *apiError) {
	parts := strings.Split(r.method, ".")
	if len(parts) != 3 {
		return nil, errf(501, "notImplemented", "%s is not implemented by the fake", r.method)
	}
	fam, verb := parts[1], parts[2]
	switch fam {
	case "projects":
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.project(r, verb)
	case "zoneOperations", "regionOperations", "globalOperations":
		switch verb {
		case "get":
			return s.getOp(ctx, r, false)
		case "wait":
			return s.getOp(ctx, r, true)
		}
		return nil, errf(501, "notImplemented", "%s is not implemented by the fake", r.method)
	}
	f, ok := families[fam]
	if !ok {
		return nil, errf(501, "notImplemented", "%s is not implemented by the fake", r.method)
	}
	scope := scopeOf(r)
	collKey := scope + "/" + f[0]
	name := r.params[nameParam[fam]]
	s.mu.Lock()
	defer s.mu.Unlock()
	if rid := r.query.Get("requestId"); rid != "" {
		if op, ok := s.requests[rid]; ok {
			return s.opView(op), nil // a retry of a call the API already took
		}
	}
	c := s.coll(collKey)
	switch verb {
	case "list":
		var items []map[string]any
		for _, it := range c {
			if !s.visible(it) {
				continue
			}
			ok, aerr := matchFilter(r.query.Get("filter"), it)
			if aerr != nil {
				return nil, aerr
			}
			if ok {
				items = append(items, s.view(fam, scope, it))
			}
		}
		return listView(f[1], items, r.query), nil
	case "get":
		it, ok := c[name]
		if !ok || !s.visible(it) {
			return nil, notFound(collKey, name)
		}
		return deepCopy(s.view(fam, scope, it)), nil
	case "insert":
		name = str(r.body, "name")
		if name == "" {
			return nil, errf(400, "required", "Required field 'resource.name' not specified")
		}
		if !nameRE.MatchString(name) {
			return nil, errf(400, "invalid", "Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", name)
		}
		if _, ok := c[name]; ok {
			return nil, errf(409, "alreadyExists", "The resource '%s' already exists", s.link(collKey+"/"+name))
		}
		it := deepCopy(r.body).(map[string]any)
		s.nextID++
		it["id"] = strconv.FormatUint(s.nextID, 10)
		it["selfLink"] = s.link(collKey + "/" + name)
		it["creationTimestamp"] = time.Now().Format(time.RFC3339Nano)
		if s.o.Visibility > 0 {
			it["_visibleAt"] = "9999-12-31T00:00:00Z" // until its operation is DONE, plus Visibility
		}
		if z, ok := strings.CutPrefix(scope, "zones/"); ok {
			it["zone"] = s.link("zones/" + z)
		} else {
			it["region"] = s.link(scope)
		}
		effect, aerr := s.insertHook(fam, scope, it)
		if aerr != nil {
			return nil, aerr
		}
		c[name] = it
		return s.newOp(r, scope, collKey+"/"+name, "insert", effect), nil
	case "delete":
		it, ok := c[name]
		if !ok {
			return nil, notFound(collKey, name)
		}
		if aerr := s.inUse(fam, scope, it); aerr != nil {
			return nil, aerr
		}
		if fam == "instances" {
			it["status"] = "STOPPING"
		}
		return s.newOp(r, scope, collKey+"/"+name, "delete", func() *apiError { return s.deleteEffect(fam, scope, collKey, name) }), nil
	}
	it, ok := c[name]
	if !ok {
		return nil, notFound(collKey, name)
	}
	switch fam + "." + verb {
	case "instances.addAccessConfig":
		return s.addAccessConfig(r, scope, it)
	case "instances.deleteAccessConfig":
		return s.deleteAccessConfig(r, scope, it)
	case "instances.setLabels":
		if str(r.body, "labelFingerprint") != str(it, "labelFingerprint") {
			return nil, errf(412, "conditionNotMet", "Labels fingerprint either invalid or resource labels have changed")
		}
		labels := obj(deepCopy(r.body["labels"]))
		return s.newOp(r, scope, collKey+"/"+name, "setLabels", func() *apiError {
			s.mu.Lock()
			defer s.mu.Unlock()
			it["labels"] = labels
			it["labelFingerprint"] = randHex(8)
			return nil
		}), nil
	case "instanceGroups.addInstances", "instanceGroups.removeInstances":
		return s.groupMembers(r, scope, collKey+"/"+name, it, verb == "addInstances")
	case "instanceGroups.listInstances":
		var items []map[string]any
		for _, m := range list(it, "_members") {
			items = append(items, map[string]any{"instance": s.link(m.(string)), "status": "RUNNING", "name": lastSeg(m.(string))})
		}
		return listView("compute#instanceGroupsListInstances", items, r.query), nil
	case "regionBackendServices.patch":
		patch := deepCopy(r.body).(map[string]any)
		if aerr := s.checkBackendService(scope, patch); aerr != nil {
			return nil, aerr
		}
		return s.newOp(r, scope, collKey+"/"+name, "patch", func() *apiError {
			s.mu.Lock()
			for k, v := range patch {
				if k != "name" {
					it[k] = v
				}
			}
			s.mu.Unlock()
			return s.syncLBs()
		}), nil
	case "regionBackendServices.getHealth":
		return s.getHealth(r, it)
	case "instances.getSerialPortOutput":
		out := s.serialOutput(scope, it)
		return map[string]any{"kind": "compute#serialPortOutput", "contents": out, "start": "0", "next": strconv.Itoa(len(out)),
			"selfLink": s.link(collKey + "/" + name + "/serialPort")}, nil
	}
	return nil, errf(501, "notImplemented", "%s is not implemented by the fake", r.method)
}

// view adds computed fields (address users and status). Called with s.mu held.
func (s *Server) view(fam, scope string, it map[string]any) map[string]any {
	v := make(map[string]any, len(it))
	for k, x := range it {
		if !strings.HasPrefix(k, "_") {
			v[k] = x
		}
	}
	switch fam {
	case "addresses":
		users := s.addressUsers(str(it, "address"))
		v["status"] = "RESERVED"
		if len(users) > 0 {
			v["status"] = "IN_USE"
			v["users"] = users
		}
	case "instanceGroups":
		v["size"] = float64(len(list(it, "_members")))
	case "disks":
		if u := s.diskUser(scope, str(it, "name")); u != "" {
			v["users"] = []any{s.link(u)}
		}
	}
	return v
}

// insertHook validates and completes a new resource; the returned effect
// runs when the insert operation is DONE. Called with s.mu held.
func (s *Server) insertHook(fam, scope string, it map[string]any) (func() *apiError, *apiError) {
	switch fam {
	case "addresses":
		typ := str(it, "addressType")
		if typ == "" {
			typ = "EXTERNAL"
			it["addressType"] = typ
		}
		if ip := str(it, "address"); ip != "" {
			if typ == "INTERNAL" {
				if aerr := s.checkInternal(ip); aerr != nil {
					return nil, aerr
				}
			} else if aerr := s.checkExternal(ip); aerr != nil {
				return nil, aerr
			}
			if len(s.addressesWithIP(ip)) > 0 {
				return nil, errf(409, "alreadyExists", "IP %s is already reserved", ip)
			}
		} else {
			ip, aerr := s.allocIP(typ == "INTERNAL")
			if aerr != nil {
				return nil, aerr
			}
			it["address"] = ip
		}
		it["kind"] = "compute#address"
		return nil, nil
	case "disks":
		it["kind"] = "compute#disk"
		it["status"] = "READY"
		return nil, nil
	case "regionHealthChecks":
		it["kind"] = "compute#healthCheck"
		return nil, nil
	case "firewalls":
		return s.insertFirewall(it)
	case "instanceGroups":
		it["kind"] = "compute#instanceGroup"
		it["_members"] = []any{}
		return nil, nil
	case "regionBackendServices":
		it["kind"] = "compute#backendService"
		if aerr := s.checkBackendService(scope, it); aerr != nil {
			return nil, aerr
		}
		it["fingerprint"] = randHex(8)
		return func() *apiError { return s.syncLBs() }, nil
	case "forwardingRules":
		it["kind"] = "compute#forwardingRule"
		ip := str(it, "IPAddress")
		if ip == "" {
			return nil, errf(400, "required", "the fake needs forwardingRule.IPAddress (the cluster's static address)")
		}
		if net.ParseIP(ip) == nil {
			if a := s.findByLink(ip); a != nil {
				ip = str(a, "address")
				it["IPAddress"] = ip
			} else {
				return nil, notFound("addresses", lastSeg(ip))
			}
		}
		for range s.addressUsers(ip) {
			// What the API answers while the address is still on an
			// instance's access config (or another rule): not
			// alreadyExists, though both are 409.
			return nil, errf(409, "IP_IN_USE_BY_ANOTHER_RESOURCE", "IP '%s' is already being used by another resource.", ip)
		}
		bs := str(it, "backendService")
		if bs == "" || s.findByLink(bs) == nil {
			return nil, notFound("backendServices", lastSeg(bs))
		}
		return func() *apiError { return s.syncLBs() }, nil
	case "instances":
		return s.insertInstance(scope, it)
	}
	return nil, nil
}

// findByLink resolves a full or partial resource URL. Called with s.mu held.
func (s *Server) findByLink(u string) map[string]any {
	rel := relOf(u)
	i := strings.LastIndex(rel, "/")
	if i < 0 {
		return nil
	}
	return s.res[rel[:i]][rel[i+1:]]
}

func (s *Server) checkBackendService(scope string, it map[string]any) *apiError {
	if len(list(it, "healthChecks")) == 0 {
		// A backend service behind an external passthrough Network Load
		// Balancer must name a regional health check.
		return errf(400, "invalid", "Invalid value for field 'resource.healthChecks': ''. A health check is required for a backend service with load balancing scheme %s.", str(it, "loadBalancingScheme"))
	}
	for _, hc := range list(it, "healthChecks") {
		if s.findByLink(hc.(string)) == nil {
			return notFound("healthChecks", lastSeg(hc.(string)))
		}
	}
	for _, b := range list(it, "backends") {
		g := str(obj(b), "group")
		if s.findByLink(g) == nil {
			return notFound("instanceGroups", lastSeg(g))
		}
	}
	return nil
}

// inUse refuses deleting what another resource uses. Called with s.mu held.
func (s *Server) inUse(fam, scope string, it map[string]any) *apiError {
	self := relOf(str(it, "selfLink"))
	busy := func(by string) *apiError {
		return errf(400, "resourceInUseByAnotherResource", "The %s resource '%s' is already being used by '%s'", fam, s.link(self), s.link(by))
	}
	switch fam {
	case "addresses":
		if u := s.addressUsers(str(it, "address")); len(u) > 0 {
			return busy(relOf(u[0].(string)))
		}
	case "disks":
		if u := s.diskUser(scope, str(it, "name")); u != "" {
			return busy(u)
		}
	case "regionHealthChecks", "instanceGroups":
		for key, c := range s.res {
			if !strings.HasSuffix(key, "/backendServices") {
				continue
			}
			for _, bs := range c {
				for _, hc := range list(bs, "healthChecks") {
					if relOf(hc.(string)) == self {
						return busy(relOf(str(bs, "selfLink")))
					}
				}
				for _, b := range list(bs, "backends") {
					if relOf(str(obj(b), "group")) == self {
						return busy(relOf(str(bs, "selfLink")))
					}
				}
			}
		}
	case "regionBackendServices":
		for key, c := range s.res {
			if !strings.HasSuffix(key, "/forwardingRules") {
				continue
			}
			for _, fr := range c {
				if relOf(str(fr, "backendService")) == self {
					return busy(relOf(str(fr, "selfLink")))
				}
			}
		}
	}
	return nil
}

// deleteEffect removes a resource when its delete operation is DONE.
func (s *Server) deleteEffect(fam, scope, collKey, name string) *apiError {
	switch fam {
	case "instances":
		s.stopNode(scope + "/instances/" + name)
		if s.o.VPC != nil {
			// A VM made again under this name is a new machine: new host
			// key (operators meet a changed key in known_hosts), empty
			// serial port, fresh boot disk.
			_ = os.RemoveAll(s.instDir(scope + "/instances/" + name))
		}
	case "forwardingRules":
		s.stopLB(scope + "/forwardingRules/" + name)
	}
	if fam == "firewalls" {
		defer s.syncLBs()
	}
	s.mu.Lock()
	it := s.coll(collKey)[name]
	delete(s.coll(collKey), name)
	if fam == "instances" && it != nil {
		self := scope + "/instances/" + name
		for _, d := range list(it, "disks") {
			d := obj(d)
			if ad, _ := d["autoDelete"].(bool); ad {
				delete(s.coll(scope+"/disks"), lastSeg(str(d, "source")))
			}
		}
		for key, c := range s.res {
			if strings.HasSuffix(key, "/instanceGroups") {
				for _, g := range c {
					g["_members"] = remove(list(g, "_members"), self)
				}
			}
		}
		for _, m := range s.draining {
			delete(m, self)
		}
	}
	s.mu.Unlock()
	if fam == "instances" {
		return s.syncLBs()
	}
	return nil
}

func remove(l []any, x string) []any {
	out := []any{}
	for _, e := range l {
		if e != x {
			out = append(out, e)
		}
	}
	return out
}

// ---- addresses ----

// allocIP returns the lowest free loopback IP of the internal (.2-.127)
// or external (.128-.254) range. Called with s.mu held.
func (s *Server) allocIP(internal bool) (string, *apiError) {
	if s.o.VPC != nil {
		return s.vpcAllocIP(internal)
	}
	lo, hi := 128, 254
	if internal {
		lo, hi = 2, 127
	}
	for x := lo; x <= hi; x++ {
		ip := fmt.Sprintf("127.0.%d.%d", s.o.Subnet, x)
		if len(s.addressesWithIP(ip)) == 0 && len(s.addressUsers(ip)) == 0 {
			return ip, nil
		}
	}
	return "", errf(403, "quotaExceeded", "no free address left in 127.0.%d.0/24", s.o.Subnet)
}

func (s *Server) addressesWithIP(ip string) []map[string]any {
	var out []map[string]any
	for key, c := range s.res {
		if strings.HasSuffix(key, "/addresses") {
			for _, a := range c {
				if str(a, "address") == ip {
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// addressUsers lists the instances and forwarding rules using ip.
func (s *Server) addressUsers(ip string) []any {
	var users []any
	for key, c := range s.res {
		switch {
		case strings.HasSuffix(key, "/instances"):
			for _, in := range c {
				for _, nic := range list(in, "networkInterfaces") {
					nic := obj(nic)
					if str(nic, "networkIP") == ip {
						users = append(users, str(in, "selfLink"))
					}
					for _, ac := range list(nic, "accessConfigs") {
						if str(obj(ac), "natIP") == ip {
							users = append(users, str(in, "selfLink"))
						}
					}
				}
			}
		case strings.HasSuffix(key, "/forwardingRules"):
			for _, fr := range c {
				if str(fr, "IPAddress") == ip {
					users = append(users, str(fr, "selfLink"))
				}
			}
		}
	}
	return users
}

// diskUser is the instance (rel path) that has the disk attached.
func (s *Server) diskUser(scope, disk string) string {
	for _, in := range s.res[scope+"/instances"] {
		for _, d := range list(in, "disks") {
			if lastSeg(str(obj(d), "source")) == disk {
				return scope + "/instances/" + str(in, "name")
			}
		}
	}
	return ""
}

// ---- instances ----

func (s *Server) insertInstance(scope string, it map[string]any) (func() *apiError, *apiError) {
	name := str(it, "name")
	it["kind"] = "compute#instance"
	it["status"] = "PROVISIONING"
	if str(it, "machineType") == "" {
		return nil, errf(400, "required", "Required field 'resource.machineType' not specified")
	}
	disks := list(it, "disks")
	if len(disks) == 0 {
		return nil, errf(400, "required", "At least one disk should be attached to the instance")
	}
	newDisks := map[string]map[string]any{}
	for i, d := range disks {
		d := obj(d)
		if d == nil {
			return nil, errf(400, "invalid", "disks[%d]", i)
		}
		if ip := obj(d["initializeParams"]); ip != nil {
			dn := str(ip, "diskName")
			if dn == "" {
				dn = name
				if i > 0 {
					dn = fmt.Sprintf("%s-%d", name, i)
				}
			}
			if _, ok := s.coll(scope + "/disks")[dn]; ok {
				return nil, errf(409, "alreadyExists", "The resource '%s' already exists", s.link(scope+"/disks/"+dn))
			}
			newDisks[dn] = map[string]any{"kind": "compute#disk", "name": dn, "status": "READY", "sizeGb": ip["diskSizeGb"],
				"sourceImage": ip["sourceImage"], "type": ip["diskType"], "selfLink": s.link(scope + "/disks/" + dn), "zone": s.link(scope)}
			d["source"] = s.link(scope + "/disks/" + dn)
			delete(d, "initializeParams")
		} else {
			src := str(d, "source")
			if s.findByLink(src) == nil {
				return nil, notFound(scope+"/disks", lastSeg(src))
			}
			if u := s.diskUser(scope, lastSeg(src)); u != "" {
				return nil, errf(400, "resourceInUseByAnotherResource", "The disk resource '%s' is already being used by '%s'", src, s.link(u))
			}
			d["source"] = s.link(relOf(src))
		}
		if _, ok := d["autoDelete"]; !ok {
			d["autoDelete"] = false
		}
		if i == 0 {
			d["boot"] = true
		}
		if str(d, "deviceName") == "" {
			d["deviceName"] = lastSeg(str(d, "source"))
		}
		d["index"] = float64(i)
		d["kind"] = "compute#attachedDisk"
		d["type"] = "PERSISTENT"
		d["mode"] = "READ_WRITE"
	}
	nics := list(it, "networkInterfaces")
	if len(nics) == 0 {
		return nil, errf(400, "required", "At least one network interface is required")
	}
	for i, n := range nics {
		nic := obj(n)
		nic["name"] = fmt.Sprintf("nic%d", i)
		nic["kind"] = "compute#networkInterface"
		ip := str(nic, "networkIP")
		if ip == "" {
			var aerr *apiError
			if ip, aerr = s.allocIP(true); aerr != nil {
				return nil, aerr
			}
		} else if net.ParseIP(ip) == nil {
			a := s.findByLink(ip)
			if a == nil {
				return nil, notFound("addresses", lastSeg(ip))
			}
			ip = str(a, "address")
		}
		if aerr := s.checkInternal(ip); aerr != nil {
			return nil, aerr
		}
		if u := s.addressUsers(ip); len(u) > 0 {
			return nil, errf(400, "resourceInUseByAnotherResource", "IP %s is in use by %s", ip, u[0])
		}
		nic["networkIP"] = ip
		for _, ac := range list(nic, "accessConfigs") {
			if aerr := s.fillAccessConfig(obj(ac)); aerr != nil {
				return nil, aerr
			}
		}
	}
	if md := obj(it["metadata"]); md != nil {
		md["fingerprint"] = randHex(8)
		md["kind"] = "compute#metadata"
	} else {
		it["metadata"] = map[string]any{"kind": "compute#metadata", "fingerprint": randHex(8)}
	}
	it["labelFingerprint"] = randHex(8)
	var created []any
	for dn, d := range newDisks {
		s.coll(scope + "/disks")[dn] = d
		created = append(created, dn)
	}
	it["_createdDisks"] = created
	key := scope + "/instances/" + name
	return func() *apiError {
		if aerr := s.bootNode(key); aerr != nil {
			return aerr
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if in := s.findByLink(key); in != nil {
			in["status"] = "RUNNING"
		}
		return nil
	}, nil
}

// fillAccessConfig validates natIP or allocates an ephemeral one.
func (s *Server) fillAccessConfig(ac map[string]any) *apiError {
	ac["kind"] = "compute#accessConfig"
	if str(ac, "type") == "" {
		ac["type"] = "ONE_TO_ONE_NAT"
	}
	if str(ac, "name") == "" {
		ac["name"] = "external-nat"
	}
	ip := str(ac, "natIP")
	if ip == "" {
		var aerr *apiError
		if ip, aerr = s.allocIP(false); aerr != nil {
			return aerr
		}
	} else if u := s.addressUsers(ip); len(u) > 0 {
		return errf(400, "resourceInUseByAnotherResource", "The IP address %s is in use by %s", ip, u[0])
	} else if aerr := s.checkExternal(ip); aerr != nil {
		return aerr
	}
	ac["natIP"] = ip
	return nil
}

func nicOf(r *request, it map[string]any) (map[string]any, *apiError) {
	want := r.query.Get("networkInterface")
	for _, n := range list(it, "networkInterfaces") {
		if str(obj(n), "name") == want {
			return obj(n), nil
		}
	}
	return nil, errf(400, "invalid", "Invalid value for field 'networkInterface': '%s'", want)
}

func (s *Server) addAccessConfig(r *request, scope string, it map[string]any) (any, *apiError) {
	nic, aerr := nicOf(r, it)
	if aerr != nil {
		return nil, aerr
	}
	if len(list(nic, "accessConfigs")) > 0 {
		return nil, errf(400, "invalid", "At most one access config currently supported.")
	}
	ac := deepCopy(r.body).(map[string]any)
	if aerr := s.fillAccessConfig(ac); aerr != nil {
		return nil, aerr
	}
	nic["accessConfigs"] = []any{ac} // reserved at once, bound when DONE
	key := scope + "/instances/" + str(it, "name")
	return s.newOp(r, scope, key, "addAccessConfig", func() *apiError { return s.bindNAT(key) }), nil
}

func (s *Server) deleteAccessConfig(r *request, scope string, it map[string]any) (any, *apiError) {
	nic, aerr := nicOf(r, it)
	if aerr != nil {
		return nil, aerr
	}
	want := r.query.Get("accessConfig")
	found := false
	for _, ac := range list(nic, "accessConfigs") {
		found = found || str(obj(ac), "name") == want
	}
	if !found {
		return nil, errf(400, "invalid", "Invalid value for field 'accessConfig': '%s'", want)
	}
	key := scope + "/instances/" + str(it, "name")
	return s.newOp(r, scope, key, "deleteAccessConfig", func() *apiError {
		s.mu.Lock()
		var keep []any
		for _, ac := range list(nic, "accessConfigs") {
			if str(obj(ac), "name") != want {
				keep = append(keep, ac)
			}
		}
		nic["accessConfigs"] = keep
		s.mu.Unlock()
		return s.bindNAT(key)
	}), nil
}

// ---- instance groups and backend health ----

func (s *Server) groupMembers(r *request, scope, key string, g map[string]any, add bool) (any, *apiError) {
	members := list(g, "_members")
	var refs []string
	for _, x := range list(r.body, "instances") {
		ref := relOf(str(obj(x), "instance"))
		if s.findByLink(ref) == nil {
			return nil, notFound("instances", lastSeg(ref))
		}
		if !strings.HasPrefix(ref, scope+"/") {
			return nil, errf(400, "invalid", "instance %s is not in the group's zone %s", ref, scope)
		}
		in := false
		for _, m := range members {
			in = in || m == ref
		}
		if add && in {
			return nil, errf(400, "memberAlreadyExists", "Resource '%s' is already a member of '%s'", s.link(ref), s.link(key))
		}
		if !add && !in {
			return nil, errf(400, "memberNotFound", "Resource '%s' is not a member of '%s'", s.link(ref), s.link(key))
		}
		refs = append(refs, ref)
	}
	verb := "removeInstances"
	if add {
		verb = "addInstances"
	}
	return s.newOp(r, scope, key, verb, func() *apiError {
		s.mu.Lock()
		for _, ref := range refs {
			if add {
				g["_members"] = append(remove(list(g, "_members"), ref), ref)
			} else {
				g["_members"] = remove(list(g, "_members"), ref)
			}
		}
		s.mu.Unlock()
		return s.syncLBs()
	}), nil
}

func (s *Server) getHealth(r *request, bs map[string]any) (any, *apiError) {
	g := s.findByLink(str(r.body, "group"))
	if g == nil {
		return nil, notFound("instanceGroups", lastSeg(str(r.body, "group")))
	}
	health := s.lbHealth(relOf(str(bs, "selfLink")))
	var hs []any
	for _, m := range list(g, "_members") {
		in := s.findByLink(m.(string))
		if in == nil {
			continue
		}
		ip := str(obj(list(in, "networkInterfaces")[0]), "networkIP")
		state := "UNHEALTHY"
		if health[m.(string)] {
			state = "HEALTHY"
		}
		hs = append(hs, map[string]any{"instance": s.link(m.(string)), "ipAddress": ip, "port": float64(APIServerPort), "healthState": state})
	}
	out := map[string]any{"kind": "compute#backendServiceGroupHealth"}
	if len(hs) > 0 {
		out["healthStatus"] = hs
	}
	return out, nil
}
