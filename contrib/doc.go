// Package contrib holds no code: it is the home of the files operators
// install beside vmbusd (the Grafana dashboard, the Prometheus alert
// rules, the systemd unit, an example configuration) and of the tests
// that keep them loadable and true to the series the daemon exports.
//
// Its tests check that the dashboard decodes with the fields Grafana
// needs and lays out without overlaps, that every metric and label the
// dashboard and the rules use is one the daemon exports, that promtool
// accepts the rules and their unit tests pass, and, where Prometheus is
// installed, that a real server loads the rules and answers every
// dashboard query.
package contrib
