package metallabtest

// DocArmDir is where the doc arm (the VIP as kubeadm's documentation
// sets it up, for comparison with hamaster's) keeps its files on a lab
// host.
const DocArmDir = "/etc/kubernetes/doc-arm"

// DocKeepalivedConf is keepalived.conf of kubeadm's "Options for
// Software Load Balancing", option 1, "keepalived and haproxy"
// (kubernetes/kubeadm, docs/ha-considerations.md at 0afcc432) as
// written, its check script in DocArmDir; format it with the host's
// STATE (MASTER on one host, BACKUP on the others), PRIORITY (101 and
// 100) and the VIP. Kept as the doc says: ROUTER_ID 51, AUTH_PASS 42,
// INTERFACE eth0, the check every 3 s, weight -2, fall 10, rise 2; VRRP
// v2 multicast with the default advert_int 1; preemption.
const DocKeepalivedConf = `! /etc/keepalived/keepalived.conf
! Configuration File for keepalived
global_defs {
    router_id LVS_DEVEL
}
vrrp_script check_apiserver {
  script "` + DocArmDir + `/check_apiserver.sh"
  interval 3
  weight -2
  fall 10
  rise 2
}

vrrp_instance VI_1 {
    state %s
    interface eth0
    virtual_router_id 51
    priority %d
    authentication {
        auth_type PASS
        auth_pass 42
    }
    virtual_ipaddress {
        %s
    }
    track_script {
        check_apiserver
    }
}
`
