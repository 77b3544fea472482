"""Cluster DNS for the local node: mirror Services/Endpoints into a dnsmasq addn-hosts file, SIGHUP dnsmasq on change.
A records: <svc>.<ns>.svc.cluster.local -> ClusterIP (or ready endpoint IPs for headless services),
<hostname>.<svc>.<ns>.svc.cluster.local -> pod IP (StatefulSet pods behind a headless service)."""

import json
import os
import re
import signal
import ssl
import time
import urllib.request

KC, CA, HOSTS, PIDF = (os.environ[k] for k in ("KC", "CA", "HOSTS", "DNSPIDF"))
DOMAIN = os.environ.get("DOMAIN", "cluster.local")
txt = open(KC).read()
server = re.search(r'server: "([^"]+)"', txt).group(1)
token = re.search(r'token: "([^"]+)"', txt).group(1)
ctx = ssl.create_default_context(cafile=CA)


def get(path):
    req = urllib.request.Request(server + path, headers={"Authorization": "Bearer " + token})
    return json.loads(urllib.request.urlopen(req, context=ctx, timeout=5).read())["items"]


last = None
while True:
    try:
        svcs = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in get("/api/v1/services")}
        recs = set()
        for (ns, name), s in svcs.items():
            cip = s["spec"].get("clusterIP")
            if cip and cip != "None":
                recs.add(f"{cip} {name}.{ns}.svc.{DOMAIN}")
        for e in get("/api/v1/endpoints"):
            ns, name = e["metadata"]["namespace"], e["metadata"]["name"]
            headless = (ns, name) in svcs and svcs[(ns, name)]["spec"].get("clusterIP") == "None"
            for sub in e.get("subsets") or []:
                for a in sub.get("addresses") or []:
                    if a.get("hostname"):
                        recs.add(f"{a['ip']} {a['hostname']}.{name}.{ns}.svc.{DOMAIN}")
                    if headless:
                        recs.add(f"{a['ip']} {name}.{ns}.svc.{DOMAIN}")
        content = "\n".join(sorted(recs)) + "\n"
        if content != last:
            tmp = HOSTS + ".tmp"
            with open(tmp, "w") as f:
                f.write(content)
            os.replace(tmp, HOSTS)
            os.kill(int(open(PIDF).read()), signal.SIGHUP)
            last = content
    except Exception as ex:
        print("dns sync error:", ex, flush=True)
    time.sleep(1)
