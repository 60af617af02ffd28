package awstest

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// What moto 5.2.1 drops from a launch and the proxy keeps, so that a
// clone can be compared with its master through EC2's own Describe calls:
//   - CreditSpecification (moto answers "standard" for every instance):
//     the proxy remembers the launch's and answers
//     DescribeInstanceCreditSpecifications with it;
//   - Placement.GroupName (moto has no placement groups and forgets the
//     name): the proxy remembers it and puts it back into
//     DescribeInstances;
//   - a block device mapping's Iops and Throughput (moto keeps neither on
//     the volume it creates): the proxy sets them on that volume with
//     ModifyVolume right after the launch, as EC2 would have made it.

var (
	itemRE       = regexp.MustCompile(`(?s)<item>.*?</item>`)
	creditIDRE   = regexp.MustCompile(`<instanceId>(i-[0-9a-f]+)</instanceId>`)
	cpuCreditsRE = regexp.MustCompile(`<cpuCredits>[a-z]+</cpuCredits>`)
	bdmRE        = regexp.MustCompile(`(?s)<deviceName>([^<]+)</deviceName>\s*<ebs>.*?<volumeId>(vol-[0-9a-f]+)</volumeId>`)
)

// launchFixups applies what moto drops from a successful RunInstances
// (called without p.mu held: it calls moto).
func (p *Proxy) launchFixups(params url.Values, body string) {
	ids := instanceIDRE.FindAllStringSubmatch(body, -1)
	if v := params.Get("CreditSpecification.CpuCredits"); v != "" {
		p.mu.Lock()
		for _, m := range ids {
			p.credits[m[1]] = v
		}
		p.mu.Unlock()
	}
	if v := params.Get("Placement.GroupName"); v != "" {
		p.mu.Lock()
		for _, m := range ids {
			p.groups[m[1]] = v
		}
		p.mu.Unlock()
	}
	if p.direct == nil {
		return
	}
	type perf struct{ iops, throughput int32 }
	want := map[string]perf{}
	for i := 1; ; i++ {
		dev := params.Get(fmt.Sprintf("BlockDeviceMapping.%d.DeviceName", i))
		if dev == "" {
			break
		}
		iops, _ := strconv.Atoi(params.Get(fmt.Sprintf("BlockDeviceMapping.%d.Ebs.Iops", i)))
		tp, _ := strconv.Atoi(params.Get(fmt.Sprintf("BlockDeviceMapping.%d.Ebs.Throughput", i)))
		if iops > 0 || tp > 0 {
			want[dev] = perf{int32(iops), int32(tp)}
		}
	}
	if len(want) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range bdmRE.FindAllStringSubmatch(body, -1) {
		w, ok := want[m[1]]
		if !ok {
			continue
		}
		in := &ec2.ModifyVolumeInput{VolumeId: aws.String(m[2])}
		if w.iops > 0 {
			in.Iops = aws.Int32(w.iops)
		}
		if w.throughput > 0 {
			in.Throughput = aws.Int32(w.throughput)
		}
		_, _ = p.direct.ModifyVolume(ctx, in) // best effort: a test comparing volumes will say what is missing
	}
}

// rewriteCredits answers DescribeInstanceCreditSpecifications with the
// launches' CPU credits. Called with p.mu held.
func (p *Proxy) rewriteCredits(s string) string {
	return itemRE.ReplaceAllStringFunc(s, func(item string) string {
		id := creditIDRE.FindStringSubmatch(item)
		if id == nil {
			return item
		}
		v, ok := p.credits[id[1]]
		if !ok {
			return item
		}
		return cpuCreditsRE.ReplaceAllLiteralString(item, "<cpuCredits>"+v+"</cpuCredits>")
	})
}

// rewritePlacement puts the launches' placement group names back into a
// DescribeInstances answer. Called with p.mu held.
func (p *Proxy) rewritePlacement(s string) string {
	for id, g := range p.groups {
		i := strings.Index(s, "<instanceId>"+id+"</instanceId>")
		if i < 0 {
			continue
		}
		const empty = "<placement><groupName/>"
		j := strings.Index(s[i:], empty)
		if j < 0 {
			continue
		}
		j += i
		s = s[:j] + "<placement><groupName>" + g + "</groupName>" + s[j+len(empty):]
	}
	return s
}
