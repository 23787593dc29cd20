#!/bin/bash
# Container health check without curl: http-ok HOST PORT PATH exits 0 when
# GET PATH answers 200.
exec 3<>"/dev/tcp/$1/$2" || exit 1
printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$3" "$1" >&3
read -r _ status _ <&3
[[ "$status" == 200 ]]
