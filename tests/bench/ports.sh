# tests/bench/ports.sh: sourced by the bench scripts, never run.

# port: a TCP port on 127.0.0.1 that no socket uses, from 20000 to 32767: below Linux's
# ephemeral range (32768 and up), where the benches' thousands of client sockets take their
# local ports and a listener started later can find its port taken. A socket bound without
# listening takes a port too (a scale run's gateway once failed to bind one that no connect
# found in use), so every local port ss lists counts, when ss is there.
port() {
    local p i
    for i in $(seq 1 100); do
        p=$((20000 + RANDOM % 12768))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
        if command -v ss >/dev/null && [[ -n $(ss -Htan "sport = :$p" 2>/dev/null) ]]; then
            continue
        fi
        echo "$p"; return 0
    done
    echo "ports.sh: no free port in 100 tries" >&2
    return 1
}

# running PID NAME LOG: true while process PID runs; otherwise says so with LOG's last lines.
# A broker that cannot bind exits at once, and every hint after it would be lost in silence.
running() {
    kill -0 "$1" 2>/dev/null && return 0
    echo "$2 (pid $1) is not running; $3 ends:" >&2
    tail -5 "$3" >&2
    return 1
}
