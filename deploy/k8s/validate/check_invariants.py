#!/usr/bin/env python3
"""Checks fedgather's deployment invariants over rendered Kubernetes manifests (kubectl kustomize output).

    check_invariants.py FILE...   ("-" reads standard input)

Every pod template (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob):
  - pod securityContext: runAsNonRoot true, runAsUser set and not 0, seccompProfile RuntimeDefault;
    no hostNetwork, hostPID, hostIPC or hostPath volumes;
  - every container and init container: securityContext with allowPrivilegeEscalation false, privileged not true,
    capabilities drop ALL and add nothing, readOnlyRootFilesystem true; non-root (runAsNonRoot not false and
    runAsUser not 0, where the container overrides the pod) and seccomp RuntimeDefault where it sets one;
    resources requests and limits for cpu and memory;
  - every long-running container (containers of all but Jobs and CronJobs): readinessProbe and livenessProbe.
The participants, where Job `site` is rendered (a StatefulSet `site` is refused: it restarts a failed site
forever):
  - an Indexed Job with completions N equal to parallelism, a backoffLimit, a ttlSecondsAfterFinished,
    restartPolicy Never and a podFailurePolicy whose FailJob rule covers every non-zero exit of container site
    (a DisruptionTarget rule, if any, before it);
  - the pods' subdomain is a headless Service, and the site advertises site-${JOB_COMPLETION_INDEX}.<subdomain>;
  - the site container's script ends by exec'ing its program (no `sleep infinity`), has no probes, and it and
    every init container take their site from JOB_COMPLETION_INDEX; it listens for peer links on [::];
  - with ConfigMap fedgather-policy: all-sites projects exactly the Secrets fedgather-site-0..N-1; the policy's
    group demo has world_size W >= N participants, among them spiffe://fedgather/site-0..N-1 (the others are
    sites outside the cluster); FEDGATHER_WORLD_SIZE is W;
  - where NetworkPolicies restrict the sites' egress, an egress rule of one of them opens port 53 over UDP and one
    over TCP (DNS). The ports only: a rule's `to:` is not checked, and a policy selects the sites when its
    podSelector's matchLabels match (matchExpressions are not evaluated).
The server, StatefulSet fedgather-server:
  - --listen on [::]; --crl names a file in a volume of ConfigMap fedgather-policy that holds it (empty, or a
    PEM X509 CRL);
  - terminationGracePeriodSeconds (default 30) at least 10 s more than --drain-timeout (default 30);
  - serviceName names a headless Service;
  - with --state-dir, --resume-grace of at least 60 s, and the site's as long (a rescheduled server pod is back
    in tens of seconds; with the 10 s default a planned restart would fail the training).
Every PodDisruptionBudget: it lets at least one pod of what it selects be evicted (minAvailable below the
replicas, maxUnavailable not 0).
Every LoadBalancer Service with loadBalancerSourceRanges: externalTrafficPolicy Local, and the ipBlocks of the
NetworkPolicies admitting its pods are exactly those ranges.

Prints each violation and exits 1 if there is any (or if no pod template was found), 0 otherwise, 2 on usage or
YAML errors. Uses PyYAML (Debian's python3-yaml).
"""
import math
import shlex
import sys

import yaml

POD_TEMPLATE_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
BATCH_KINDS = {"Job", "CronJob"}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "ReplicaSet"}

# The server's defaults (fedgather-server --help).
DEFAULT_DRAIN_TIMEOUT_S = 30.0
# Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE_S = 30
# The shortest --resume-grace, on the server and the sites, that outlasts a rescheduled server pod.
MIN_RESUME_GRACE_S = 60.0
# fedgather-server's and fedavg_site's default --resume-grace.
DEFAULT_RESUME_GRACE_S = 10.0
# How much longer than the drain the kubelet must wait before SIGKILL: the server writes its final audit records
# and signed anchor after the drain.
GRACE_MARGIN_S = 10


def dig(obj, *path):
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def find(objects, kind, name):
    return next((o for o in objects if o.get("kind") == kind and dig(o, "metadata", "name") == name), None)


def selects(selector, labels):
    """Whether a matchLabels selector (a dict; empty selects all) selects pods with `labels`."""
    return all((labels or {}).get(k) == v for k, v in (selector or {}).items())


def container(pod, name):
    return next((c for c in pod.get("containers") or [] if c.get("name") == name), None)


def flags(c):
    """The --name=value and --name value flags of a container's command and args, as {name: value}; for a
    `sh -c SCRIPT` container, those of the script's last line (its words as the shell splits them, unexpanded)."""
    words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
    lines = logical_lines(script(c))
    if lines:
        try:
            words = shlex.split(lines[-1])
        except ValueError:
            words = lines[-1].split()
    out = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, eq, value = word.partition("=")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
            value = words[i + 1]
        out[name] = value
    return out


def script(c):
    """The text of a container's `sh -c SCRIPT` (the word after -c in command + args), or ""."""
    words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
    return words[words.index("-c") + 1] if "-c" in words[:-1] else ""


def logical_lines(text):
    """The script's lines with backslash continuations joined, without blank lines and comments."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current and not current.startswith("#"):
            out.append(current)
        current = ""
    if current:
        out.append(current)
    return out


def seconds(text, default):
    try:
        return float(text) if text is not None else default
    except ValueError:
        return None


def check_pod(where, kind, pod, problems):
    def bad(what):
        problems.append(f"{where}: {what}")

    psc = pod.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True:
        bad("pod securityContext.runAsNonRoot is not true")
    if not isinstance(psc.get("runAsUser"), int) or psc.get("runAsUser") == 0:
        bad("pod securityContext.runAsUser is not a non-zero UID")
    if dig(psc, "seccompProfile", "type") != "RuntimeDefault":
        bad("pod securityContext.seccompProfile.type is not RuntimeDefault")
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host) is True:
            bad(f"{host} is true")
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            bad(f"volume {volume.get('name')} is a hostPath")

    groups = [("initContainers", False), ("containers", kind not in BATCH_KINDS)]
    if not pod.get("containers"):
        bad("no containers")
    for field, long_running in groups:
        for c in pod.get(field) or []:
            cw = f"{field[:-1]} {c.get('name')}"
            csc = c.get("securityContext")
            if not isinstance(csc, dict):
                bad(f"{cw}: no securityContext")
                csc = {}
            if csc.get("allowPrivilegeEscalation") is not False:
                bad(f"{cw}: allowPrivilegeEscalation is not false")
            if csc.get("privileged") is True:
                bad(f"{cw}: privileged is true")
            caps = csc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                bad(f"{cw}: capabilities.drop does not contain ALL")
            if caps.get("add"):
                bad(f"{cw}: capabilities.add is {caps.get('add')}")
            if csc.get("readOnlyRootFilesystem") is not True:
                bad(f"{cw}: readOnlyRootFilesystem is not true")
            non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
            if non_root is not True:
                bad(f"{cw}: runAsNonRoot is not true")
            if csc.get("runAsUser", psc.get("runAsUser")) == 0:
                bad(f"{cw}: runs as UID 0")
            seccomp = dig(csc, "seccompProfile", "type") or dig(psc, "seccompProfile", "type")
            if seccomp != "RuntimeDefault":
                bad(f"{cw}: seccompProfile.type is {seccomp}, not RuntimeDefault")
            resources = c.get("resources") or {}
            for section in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    if not (resources.get(section) or {}).get(resource):
                        bad(f"{cw}: no resources.{section}.{resource}")
            if long_running:
                for probe in ("readinessProbe", "livenessProbe"):
                    if not isinstance(c.get(probe), dict):
                        bad(f"{cw}: no {probe}")


def check_site_job(objects, problems):
    """The participants' Indexed Job `site`: how it runs, fails and names its pods."""
    if find(objects, "StatefulSet", "site") is not None:
        problems.append("StatefulSet site: the sites must be an Indexed Job (a StatefulSet restarts a failed site "
                        "forever)")
    job = find(objects, "Job", "site")
    if job is None:
        return

    def bad(what):
        problems.append(f"Job site: {what}")

    spec = job.get("spec") or {}
    pod = dig(spec, "template", "spec") or {}
    if spec.get("completionMode") != "Indexed":
        bad(f"completionMode is {spec.get('completionMode')!r}, not Indexed (the site's identity is its index)")
    completions, parallelism = spec.get("completions"), spec.get("parallelism")
    if completions != parallelism:
        bad(f"parallelism {parallelism!r} is not completions {completions!r}: every site must run at once")
    if not isinstance(spec.get("backoffLimit"), int) or spec.get("backoffLimit") < 0:
        bad(f"backoffLimit is {spec.get('backoffLimit')!r}, not set")
    if not isinstance(spec.get("ttlSecondsAfterFinished"), int):
        bad(f"ttlSecondsAfterFinished is {spec.get('ttlSecondsAfterFinished')!r}, not set")
    if pod.get("restartPolicy") != "Never":
        bad(f"restartPolicy is {pod.get('restartPolicy')!r}, not Never (a podFailurePolicy needs Never)")
    rules = dig(spec, "podFailurePolicy", "rules") or []
    fail_job = next((i for i, r in enumerate(rules)
                     if r.get("action") == "FailJob"
                     and dig(r, "onExitCodes", "containerName") in (None, "site")
                     and dig(r, "onExitCodes", "operator") == "NotIn"
                     and dig(r, "onExitCodes", "values") == [0]), None)
    if fail_job is None:
        bad("podFailurePolicy has no FailJob rule for every non-zero exit of container site "
            "(onExitCodes: operator NotIn, values [0])")
    else:
        for i, r in enumerate(rules):
            disruption = any(c.get("type") == "DisruptionTarget" for c in r.get("onPodConditions") or [])
            if disruption and i > fail_job:
                bad("podFailurePolicy's DisruptionTarget rule comes after its FailJob rule, which an evicted site's "
                    "exit status matches first")

    subdomain = pod.get("subdomain")
    service = find(objects, "Service", subdomain) if subdomain else None
    if service is None or dig(service, "spec", "clusterIP") != "None":
        bad(f"subdomain is {subdomain!r}, not a headless Service: the sites' peer names would not resolve")
    elif not selects(dig(service, "spec", "selector"), dig(spec, "template", "metadata", "labels")):
        bad(f"the headless Service {subdomain} does not select the Job's pods")

    site = container(pod, "site")
    if site is None:
        bad("no container site")
        return
    text = script(site)
    lines = logical_lines(text)
    if not lines or not lines[-1].startswith("exec "):
        last = lines[-1] if lines else ""
        bad(f"container site: its script does not end by exec'ing the site (last line: {last[:60]!r}), so the "
            "site is not PID 1 and the Job does not end with it")
    for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
        if "sleep infinity" in script(c) or "sleep infinity" in " ".join(map(str, c.get("command") or [])):
            bad(f"container {c.get('name')}: sleep infinity: a Job's pod must end when its work does")
        if "JOB_COMPLETION_INDEX" not in script(c):
            bad(f"container {c.get('name')}: does not take its site from JOB_COMPLETION_INDEX")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in site:
            bad(f"container site: has a {probe}; a site's exit status is its result, and a probe against the "
                "server would fail the Job when the server restarts")
    site_flags = flags(site)
    listen = site_flags.get("--peer-listen", "")
    if not listen.startswith("[::]:"):
        bad(f"container site: --peer-listen is {listen!r}, not [::]:PORT (IPv4 and IPv6)")
    advertise = site_flags.get("--peer-advertise", "")
    want = f"site-${{JOB_COMPLETION_INDEX}}.{subdomain}:"
    if not advertise.startswith(want):
        bad(f"container site: --peer-advertise is {advertise!r}, not {want}PORT (the pod's name in its subdomain)")


def check_sites_agree(objects, problems):
    job = find(objects, "Job", "site")
    policy_map = find(objects, "ConfigMap", "fedgather-policy")
    if job is None or policy_map is None:
        return
    where = "Job site / ConfigMap fedgather-policy"
    completions = dig(job, "spec", "completions")
    spec = dig(job, "spec", "template", "spec") or {}
    site = container(spec, "site") or {}
    env = {e.get("name"): e.get("value") for e in site.get("env") or []}
    volume = next((v for v in spec.get("volumes") or [] if v.get("name") == "all-sites"), {})
    secrets = [dig(s, "secret", "name") for s in dig(volume, "projected", "sources") or []]
    try:
        policy = yaml.safe_load(dig(policy_map, "data", "policy.yaml") or "")
    except yaml.YAMLError as err:
        problems.append(f"{where}: policy.yaml does not parse: {err}")
        return
    group = next((g for g in (policy or {}).get("groups") or [] if g.get("name") == "demo"), None)
    if not isinstance(completions, int) or completions < 1:
        problems.append(f"{where}: completions is {completions!r}")
        return
    want_secrets = [f"fedgather-site-{i}" for i in range(completions)]
    if secrets != want_secrets:
        problems.append(f"{where}: all-sites projects {secrets}, want {want_secrets}")
    if group is None:
        problems.append(f"{where}: the policy has no group demo")
        return
    world_size = group.get("world_size")
    if not isinstance(world_size, int) or completions > world_size:
        problems.append(f"{where}: completions {completions} exceed the policy's world_size {world_size!r}")
    if env.get("FEDGATHER_WORLD_SIZE") != str(world_size):
        problems.append(f"{where}: FEDGATHER_WORLD_SIZE is {env.get('FEDGATHER_WORLD_SIZE')!r}, "
                        f"the policy's world_size {world_size!r}")
    participants = {k for k, v in (group.get("members") or {}).items() if v == "participant"}
    if len(participants) != world_size:
        problems.append(f"{where}: the policy has {len(participants)} participants, world_size {world_size!r}")
    missing = sorted({f"spiffe://fedgather/site-{i}" for i in range(completions)} - participants)
    if missing:
        problems.append(f"{where}: the policy's participants lack {missing}")


def check_server(objects, problems):
    server_set = find(objects, "StatefulSet", "fedgather-server")
    if server_set is None:
        return

    def bad(what):
        problems.append(f"StatefulSet fedgather-server: {what}")

    pod = dig(server_set, "spec", "template", "spec") or {}
    server = container(pod, "server")
    if server is None:
        bad("no container server")
        return
    f = flags(server)
    listen = f.get("--listen", "0.0.0.0:50051")
    if not listen.startswith("[::]:"):
        bad(f"--listen is {listen}, not [::]:PORT (IPv4 and IPv6)")

    crl = f.get("--crl")
    if not crl:
        bad("no --crl: revoking a certificate would change nothing")
    else:
        directory, _, key = crl.rpartition("/")
        mount = next((m for m in server.get("volumeMounts") or [] if m.get("mountPath", "").rstrip("/") == directory),
                     None)
        volume = next((v for v in pod.get("volumes") or [] if mount and v.get("name") == mount.get("name")), None)
        map_name = dig(volume, "configMap", "name")
        if map_name is None:
            bad(f"--crl={crl}: {directory} is not a mounted ConfigMap volume")
        else:
            items = dig(volume, "configMap", "items")
            if items:
                key = next((i.get("key") for i in items if i.get("path") == key), None)
            config_map = find(objects, "ConfigMap", map_name)
            data = (config_map or {}).get("data") or {}
            if key not in data:
                bad(f"--crl={crl}: ConfigMap {map_name} has no key {key}")
            elif data[key] != "" and not data[key].lstrip().startswith("-----BEGIN X509 CRL-----"):
                bad(f"--crl={crl}: ConfigMap {map_name}'s {key} is neither empty nor a PEM X509 CRL (the server "
                    "would refuse to start)")

    drain = seconds(f.get("--drain-timeout"), DEFAULT_DRAIN_TIMEOUT_S)
    grace = pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    if drain is None:
        bad(f"--drain-timeout={f.get('--drain-timeout')} is not a number of seconds")
    elif not isinstance(grace, int) or grace < drain + GRACE_MARGIN_S:
        bad(f"terminationGracePeriodSeconds {grace} is not at least {GRACE_MARGIN_S} s more than --drain-timeout "
            f"{drain:g}: the kubelet would kill the server before it finishes its audit log")

    if f.get("--state-dir"):
        resume = seconds(f.get("--resume-grace"), DEFAULT_RESUME_GRACE_S)
        if resume is None or resume < MIN_RESUME_GRACE_S:
            bad(f"--resume-grace is {f.get('--resume-grace', '10 (the default)')}: with --state-dir it must be at "
                f"least {MIN_RESUME_GRACE_S:g} s, or the sites give up before a rescheduled pod is back")
        job = find(objects, "Job", "site")
        site = container(dig(job, "spec", "template", "spec") or {}, "site") if job else None
        if site is not None and resume is not None:
            site_resume = seconds(flags(site).get("--resume-grace"), DEFAULT_RESUME_GRACE_S)
            if site_resume is None or site_resume < resume:
                bad(f"Job site's --resume-grace is {flags(site).get('--resume-grace', '10 (the default)')}, "
                    f"shorter than the server's {resume:g} s: the sites would give up on a restarting server")

    service_name = dig(server_set, "spec", "serviceName")
    service = find(objects, "Service", service_name) if service_name else None
    if service is None or dig(service, "spec", "clusterIP") != "None":
        bad(f"serviceName {service_name} is not a headless Service (clusterIP: None)")


def check_disruption_budgets(objects, problems):
    for pdb in (o for o in objects if o.get("kind") == "PodDisruptionBudget"):
        where = f"PodDisruptionBudget {dig(pdb, 'metadata', 'name')}"
        selector = dig(pdb, "spec", "selector", "matchLabels") or {}
        replicas = sum(dig(o, "spec", "replicas") if isinstance(dig(o, "spec", "replicas"), int) else 1
                       for o in objects if o.get("kind") in WORKLOAD_KINDS
                       and selects(selector, dig(o, "spec", "template", "metadata", "labels")))
        if replicas == 0:
            problems.append(f"{where}: selects no workload's pods")
            continue
        spec = pdb.get("spec") or {}
        if "minAvailable" in spec:
            value = spec["minAvailable"]
            if isinstance(value, str) and value.endswith("%"):
                value = math.ceil(int(value[:-1]) * replicas / 100)
            if not isinstance(value, int) or value >= replicas:
                problems.append(f"{where}: minAvailable {spec['minAvailable']} >= the {replicas} replicas it "
                                "selects: no pod may ever be evicted, and every node drain blocks")
        if "maxUnavailable" in spec and str(spec["maxUnavailable"]) in ("0", "0%"):
            problems.append(f"{where}: maxUnavailable is {spec['maxUnavailable']}: every node drain blocks")


def egress_ports_open(objects, labels):
    """Which (protocol, port) the egress NetworkPolicies selecting pods with `labels` allow; None: all."""
    policies = [p for p in objects if p.get("kind") == "NetworkPolicy"
                and selects(dig(p, "spec", "podSelector", "matchLabels"), labels)
                and "Egress" in (dig(p, "spec", "policyTypes") or [])]
    if not policies:
        return None
    allowed = set()
    for p in policies:
        for rule in dig(p, "spec", "egress") or []:
            ports = rule.get("ports")
            if not ports:
                return None
            for port in ports:
                allowed.add((port.get("protocol", "TCP"), port.get("port")))
    return allowed


def check_site_dns(objects, problems):
    for job in (o for o in objects if o.get("kind") == "Job" and dig(o, "metadata", "name") == "site"):
        allowed = egress_ports_open(objects, dig(job, "spec", "template", "metadata", "labels"))
        if allowed is None:
            continue
        for protocol in ("UDP", "TCP"):
            if (protocol, 53) not in allowed:
                problems.append(f"Job site: no NetworkPolicy lets the sites reach DNS ({protocol} port 53); "
                                "they could not resolve the server's or each other's names")


def check_load_balancers(objects, problems):
    for service in (o for o in objects if o.get("kind") == "Service" and dig(o, "spec", "type") == "LoadBalancer"):
        ranges = dig(service, "spec", "loadBalancerSourceRanges")
        if not ranges:
            continue
        where = f"Service {dig(service, 'metadata', 'name')}"
        policy = dig(service, "spec", "externalTrafficPolicy") or "Cluster"
        if policy != "Local":
            problems.append(f"{where}: externalTrafficPolicy is {policy}, not Local: the pods would see a node's "
                            "address, not the client's, and NetworkPolicy ipBlocks could not match it")
        selector = dig(service, "spec", "selector") or {}
        blocks = set()
        for p in (o for o in objects if o.get("kind") == "NetworkPolicy"):
            if not selects(dig(p, "spec", "podSelector", "matchLabels"), selector):
                continue
            for rule in dig(p, "spec", "ingress") or []:
                blocks |= {dig(peer, "ipBlock", "cidr") for peer in rule.get("from") or [] if "ipBlock" in peer}
        if blocks != set(ranges):
            problems.append(f"{where}: the NetworkPolicy ipBlocks admitting its pods, {sorted(blocks)}, differ from "
                            f"its loadBalancerSourceRanges {sorted(ranges)}")


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    objects = []
    for name in argv[1:]:
        try:
            stream = sys.stdin if name == "-" else open(name, encoding="utf-8")
            with stream:
                objects += [d for d in yaml.safe_load_all(stream) if d is not None]
        except (OSError, yaml.YAMLError) as err:
            print(f"check_invariants: {name}: {err}", file=sys.stderr)
            return 2
    problems = []
    pods = 0
    for obj in objects:
        if not isinstance(obj, dict):
            problems.append(f"not a mapping: {obj!r:.60}")
            continue
        kind = obj.get("kind")
        if kind not in POD_TEMPLATE_PATHS:
            continue
        where = f"{kind} {dig(obj, 'metadata', 'name')}"
        pod = dig(obj, *POD_TEMPLATE_PATHS[kind])
        if not isinstance(pod, dict):
            problems.append(f"{where}: no pod template")
            continue
        pods += 1
        check_pod(where, kind, pod, problems)
    objects = [o for o in objects if isinstance(o, dict)]
    check_site_job(objects, problems)
    check_sites_agree(objects, problems)
    check_site_dns(objects, problems)
    check_server(objects, problems)
    check_disruption_budgets(objects, problems)
    check_load_balancers(objects, problems)
    if pods == 0:
        problems.append("no pod templates found")
    for p in problems:
        print(f"FAIL {p}")
    print(f"invariants: {pods} pod templates, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
