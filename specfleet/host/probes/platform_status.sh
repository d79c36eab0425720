# The platform part of a Spark's one status read (release_status.PLATFORM): what the host is, as `key<TAB>value`
# lines. Read-only; a fragment of the one remote command (facts.SpecfleetHost). From the environment: DATA.
echo "arch	$(uname -m)"
( . /etc/os-release 2>/dev/null; echo "os	${PRETTY_NAME:-unknown}" )
droot=
if out=$(docker info --format '{{json .Runtimes}}{{"\n"}}{{.DefaultRuntime}}{{"\n"}}{{.DockerRootDir}}{{"\n"}}{{json .SecurityOptions}}' 2>&1); then
  echo "docker	ok"; echo "runtimes	$(printf '%s\n' "$out" | sed -n 1p)"
  echo "default_runtime	$(printf '%s\n' "$out" | sed -n 2p)"; droot=$(printf '%s\n' "$out" | sed -n 3p)
  echo "docker_security	$(printf '%s\n' "$out" | sed -n 4p)"
else echo "docker	$(printf '%s' "$out" | tail -n 1)"; fi
echo "gpu_hook	$(command -v nvidia-container-runtime-hook 2>/dev/null)"
echo "apparmor	$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)	$(grep -c '^docker-default ' /sys/kernel/security/apparmor/profiles 2>/dev/null)	$(command -v apparmor_parser 2>/dev/null)"
echo "dpkg_busy	$(ps -eo comm= 2>/dev/null | grep -E -x 'apt|apt-get|aptitude|dpkg|unattended-upgr' | sort -u | tr '\n' ' ')"
d="$DATA"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "free	$(df -PB1 "$d" | awk 'NR==2{print $4}')"
if [ -n "$droot" ]; then set -- $(df -PB1 "$d" "$droot" 2>/dev/null | awk 'NR>1{print $1, $4}')
  [ "$#" -eq 4 ] && echo "docker_root	$4	$([ "$1" = "$3" ] && echo same || echo other)	$droot"; fi
