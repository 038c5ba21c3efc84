//! Geo commands. A geo key is a sorted set whose scores are 52-bit
//! geohashes (see `util::geohash`), so GEOADD is ZADD with computed scores
//! and every Z* command works on it. Searches scan the score ranges of the
//! nine cells around the centre and filter by exact distance, in Redis's
//! cell order, so an unsorted reply lists members as Redis does.

use bytes::Bytes;

use super::collection::View;
use super::zset::{self, decode_score, walk_scores, Entry};
use super::Fail;
use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::storage::keyspace::Key;
use crate::storage::merge::Order;
use crate::storage::{KeyType, KvRead};
use crate::util::geohash::{self, Shape, ShapeKind, LAT_MAX, LAT_MIN, LON_MAX, LON_MIN};

const ZSET: KeyType = KeyType::ZSet;
const NO_MEMBER: &str = "could not decode requested zset member";

/// Meters per unit (`m`, `km`, `ft`, `mi`, any case), with Redis's error.
fn unit(arg: &[u8]) -> Result<f64, Reply> {
    if is(arg, "m") {
        Ok(1.0)
    } else if is(arg, "km") {
        Ok(1000.0)
    } else if is(arg, "ft") {
        Ok(0.3048)
    } else if is(arg, "mi") {
        Ok(1609.34)
    } else {
        Err(Reply::err(
            "unsupported unit provided. please use M, KM, FT, MI",
        ))
    }
}

/// A longitude, latitude pair at argv[at..at + 2], checked against the
/// indexable range.
fn lon_lat(a: &Args, at: usize) -> Result<(f64, f64), Reply> {
    let lon = args::float(a.get(at))?;
    let lat = args::float(a.get(at + 1))?;
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return Err(Reply::err(format!(
            "invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )));
    }
    Ok((lon, lat))
}

/// A float argument with a command-specific error text.
fn float_or(arg: &[u8], msg: &str) -> Result<f64, Reply> {
    crate::util::num::parse_f64(arg).ok_or_else(|| Reply::err(msg))
}

/// `radius unit` at argv[at..at + 2]: the radius and meters per unit.
fn radius_arg(a: &Args, at: usize) -> Result<(f64, f64), Reply> {
    let radius = float_or(a.get(at), "need numeric radius")?;
    if radius < 0.0 {
        return Err(Reply::err("radius cannot be negative"));
    }
    Ok((radius, unit(a.get(at + 1))?))
}

/// `width height unit` at argv[at..at + 3].
fn box_arg(a: &Args, at: usize) -> Result<(f64, f64, f64), Reply> {
    let width = float_or(a.get(at), "need numeric width")?;
    let height = float_or(a.get(at + 1), "need numeric height")?;
    if height < 0.0 || width < 0.0 {
        return Err(Reply::err("height or width cannot be negative"));
    }
    Ok((width, height, unit(a.get(at + 2))?))
}

/// A coordinate as Redis replies with it: a bulk string in RESP2, a RESP3
/// double, both in `%.17Lf` form (not the `%.17g` of other doubles).
fn coordinate(v: f64, resp3: bool) -> Reply {
    let text = geohash::human_coordinate(v);
    if resp3 {
        // Reply::Double would print `%.17g`; write the double line as is.
        Reply::Encoded(Bytes::from(format!(",{text}\r\n")))
    } else {
        Reply::bulk(text)
    }
}

/// A distance with four decimals, as Redis always prints one.
fn distance_reply(d: f64) -> Reply {
    Reply::bulk(format!("{d:.4}"))
}

/// The position of a member of a live zset, if it is one.
fn member_position(r: &dyn KvRead, z: &View, member: &[u8]) -> Result<Option<(f64, f64)>, Fail> {
    Ok(z.get(r, member)?
        .map(|v| geohash::position_of(decode_score(&v))))
}

/// GEOADD key [NX|XX] [CH] longitude latitude member [...]: ZADD with each
/// position turned into its geohash score, as Redis rewrites it.
pub fn geoadd(s: &mut Session, a: Args) -> Action {
    let (mut nx, mut xx) = (false, false);
    let mut i = 2;
    while i < a.len() {
        let o = a.get(i);
        if is(o, "nx") {
            nx = true;
        } else if is(o, "xx") {
            xx = true;
        } else if !is(o, "ch") {
            break;
        }
        i += 1;
    }
    if !(a.len() - i).is_multiple_of(3) || (xx && nx) {
        return error(SYNTAX).into();
    }
    let mut argv = Vec::with_capacity(i + (a.len() - i) / 3 * 2);
    argv.push(Bytes::from_static(b"zadd"));
    argv.extend_from_slice(&a.all()[1..i]);
    for at in (i..a.len()).step_by(3) {
        let (lon, lat) = match lon_lat(&a, at) {
            Ok(p) => p,
            Err(r) => return r.into(),
        };
        let score = geohash::score_of(lon, lat).expect("checked range");
        argv.push(Bytes::from(score.to_string()));
        argv.push(a.get(at + 2).clone());
    }
    // With no triples ZADD gives the syntax error Redis gives.
    zset::zadd(s, Args::new(argv))
}

/// GEOPOS key [member ...]
pub fn geopos(s: &mut Session, a: Args) -> Action {
    let members = a.from(2).to_vec();
    let resp3 = s.resp3;
    s.read(a.get(1), move |r, k| {
        let z = View::load(r, k, ZSET)?;
        let mut out = Vec::with_capacity(members.len());
        for m in &members {
            let pos = match &z {
                Some(z) => member_position(r, z, m)?,
                None => None,
            };
            out.push(match pos {
                Some((lon, lat)) => {
                    Reply::Array(vec![coordinate(lon, resp3), coordinate(lat, resp3)])
                }
                None => Reply::NilArray,
            });
        }
        Ok(Reply::Array(out))
    })
}

/// GEOHASH key [member ...]
pub fn geohash(s: &mut Session, a: Args) -> Action {
    let members = a.from(2).to_vec();
    s.read(a.get(1), move |r, k| {
        let z = View::load(r, k, ZSET)?;
        let mut out = Vec::with_capacity(members.len());
        for m in &members {
            let score = match &z {
                Some(z) => z.get(r, m)?.map(|v| decode_score(&v)),
                None => None,
            };
            out.push(score.map_or(Reply::Nil, |sc| Reply::bulk(geohash::geohash_string(sc))));
        }
        Ok(Reply::Array(out))
    })
}

/// GEODIST key member1 member2 [M|KM|FT|MI]
pub fn geodist(s: &mut Session, a: Args) -> Action {
    let to_meters = match a.len() {
        4 => 1.0,
        5 => match unit(a.get(4)) {
            Ok(u) => u,
            Err(r) => return r.into(),
        },
        _ => return error(SYNTAX).into(),
    };
    let (m1, m2) = (a.get(2).clone(), a.get(3).clone());
    s.read(a.get(1), move |r, k| {
        let Some(z) = View::load(r, k, ZSET)? else {
            return Ok(Reply::Nil);
        };
        // Redis looks both scores up before decoding either.
        let (Some(p1), Some(p2)) = (member_position(r, &z, &m1)?, member_position(r, &z, &m2)?)
        else {
            return Ok(Reply::Nil);
        };
        let d = geohash::distance(p1.0, p1.1, p2.0, p2.1);
        Ok(distance_reply(d / to_meters))
    })
}

/// The search commands, which share one parser with per-command rules.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// GEORADIUS: centre by coordinates, STORE allowed.
    Radius,
    /// GEORADIUS_RO.
    RadiusRo,
    /// GEORADIUSBYMEMBER: centre at a member, STORE allowed.
    ByMember,
    /// GEORADIUSBYMEMBER_RO.
    ByMemberRo,
    /// GEOSEARCH: FROM* and BY* options.
    Search,
    /// GEOSEARCHSTORE: GEOSEARCH into a destination, with STOREDIST.
    SearchStore,
}

impl Variant {
    fn coords(self) -> bool {
        matches!(self, Variant::Radius | Variant::RadiusRo)
    }

    fn by_member(self) -> bool {
        matches!(self, Variant::ByMember | Variant::ByMemberRo)
    }

    fn search(self) -> bool {
        matches!(self, Variant::Search | Variant::SearchStore)
    }

    /// Whether STORE / STOREDIST key are options (GEORADIUS[BYMEMBER]).
    fn store_options(self) -> bool {
        matches!(self, Variant::Radius | Variant::ByMember)
    }

    /// Index of the first option.
    fn base(self) -> usize {
        match self {
            Variant::Radius | Variant::RadiusRo => 6,
            Variant::ByMember | Variant::ByMemberRo => 5,
            Variant::Search => 2,
            Variant::SearchStore => 3,
        }
    }
}

/// Result order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    /// Cell by cell, each by score: Redis's unsorted order.
    None,
    Asc,
    Desc,
}

/// A member found inside the search area.
struct Point {
    member: Vec<u8>,
    score: f64,
    lon: f64,
    lat: f64,
    /// Meters until the results are cut; then in the request's unit.
    dist: f64,
}

/// What a search returns: the points in reply order, already limited, and
/// how to present them.
struct Found {
    points: Vec<Point>,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    /// Whether a store scores members by distance (STOREDIST).
    store_dist: bool,
}

/// The destination a GEORADIUS / GEORADIUSBYMEMBER call stores into: the
/// last STORE or STOREDIST key, found by skipping options the way the
/// parser does (COUNT takes a value). Needed before the call is routed.
fn store_key(a: &Args, v: Variant) -> Option<Bytes> {
    if !v.store_options() {
        return None;
    }
    let mut dest = None;
    let mut i = v.base();
    while i < a.len() {
        let o = a.get(i);
        let has_value = i + 1 < a.len();
        if has_value && is(o, "count") {
            i += 1;
        } else if has_value && (is(o, "store") || is(o, "storedist")) {
            dest = Some(a.get(i + 1).clone());
            i += 1;
        }
        i += 1;
    }
    dest
}

/// Parses a search command and runs it on the source zset, checking in
/// Redis's order: the key's type, the fixed arguments, each option in
/// turn (FROMMEMBER looks its member up as it is parsed), then option
/// combinations. `None` when the source key does not exist.
fn find(r: &dyn KvRead, key: Key, a: &Args, v: Variant) -> Result<Option<Found>, Fail> {
    let z = View::load(r, key, ZSET)?;
    let mut center = None;
    let mut kind = None;
    let mut conversion = 1.0;
    if v.coords() {
        center = Some(lon_lat(a, 2)?);
        let (radius, c) = radius_arg(a, 4)?;
        kind = Some(ShapeKind::Circle { radius });
        conversion = c;
    } else if v.by_member() {
        // Without the key Redis parses nothing more of the fixed part.
        if let Some(z) = &z {
            center = Some(member_position(r, z, a.get(2))?.ok_or_else(|| Reply::err(NO_MEMBER))?);
            let (radius, c) = radius_arg(a, 3)?;
            kind = Some(ShapeKind::Circle { radius });
            conversion = c;
        }
    }
    let (mut with_dist, mut with_hash, mut with_coord) = (false, false, false);
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) =
        (false, false, false, false);
    let mut sort = Sort::None;
    let mut any = false;
    let mut count: i64 = 0;
    let mut store = v == Variant::SearchStore;
    let mut store_dist = false;
    let mut i = v.base();
    while i < a.len() {
        let o = a.get(i);
        let left = a.len() - i - 1;
        if is(o, "withdist") {
            with_dist = true;
        } else if is(o, "withhash") {
            with_hash = true;
        } else if is(o, "withcoord") {
            with_coord = true;
        } else if is(o, "any") {
            any = true;
        } else if is(o, "asc") {
            sort = Sort::Asc;
        } else if is(o, "desc") {
            sort = Sort::Desc;
        } else if is(o, "count") && left >= 1 {
            count = args::int(a.get(i + 1))?;
            if count <= 0 {
                return Err(Reply::err("COUNT must be > 0").into());
            }
            i += 1;
        } else if v.store_options() && left >= 1 && (is(o, "store") || is(o, "storedist")) {
            store = true;
            store_dist = is(o, "storedist");
            i += 1;
        } else if v == Variant::SearchStore && is(o, "storedist") {
            store_dist = true;
        } else if v.search() && left >= 1 && !from_lonlat && is(o, "frommember") {
            if let Some(z) = &z {
                let pos = member_position(r, z, a.get(i + 1))?;
                center = Some(pos.ok_or_else(|| Reply::err(NO_MEMBER))?);
            }
            from_member = true;
            i += 1;
        } else if v.search() && left >= 2 && !from_member && is(o, "fromlonlat") {
            center = Some(lon_lat(a, i + 1)?);
            from_lonlat = true;
            i += 2;
        } else if v.search() && left >= 2 && !by_box && is(o, "byradius") {
            let (radius, c) = radius_arg(a, i + 1)?;
            kind = Some(ShapeKind::Circle { radius });
            conversion = c;
            by_radius = true;
            i += 2;
        } else if v.search() && left >= 3 && !by_radius && is(o, "bybox") {
            let (width, height, c) = box_arg(a, i + 1)?;
            kind = Some(ShapeKind::Box { width, height });
            conversion = c;
            by_box = true;
            i += 3;
        } else {
            return Err(error(SYNTAX).into());
        }
        i += 1;
    }
    if store && (with_dist || with_hash || with_coord) {
        let who = if v == Variant::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(Reply::err(format!(
            "{who} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        ))
        .into());
    }
    let name = String::from_utf8_lossy(a.get(0));
    if v.search() && !(from_member || from_lonlat) {
        return Err(Reply::err(format!(
            "exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        ))
        .into());
    }
    if v.search() && !(by_radius || by_box) {
        return Err(Reply::err(format!(
            "exactly one of BYRADIUS and BYBOX can be specified for {name}"
        ))
        .into());
    }
    if any && count == 0 {
        return Err(Reply::err("the ANY argument requires COUNT argument").into());
    }
    let (Some(z), Some((lon, lat)), Some(kind)) = (z, center, kind) else {
        return Ok(None);
    };
    // COUNT without ANY means "the nearest N": sort even when not asked.
    if count != 0 && sort == Sort::None && !any {
        sort = Sort::Asc;
    }
    let shape = Shape {
        lon,
        lat,
        kind,
        conversion,
    };
    let limit = if any { count as usize } else { 0 };
    let mut points = scan_cells(r, &z, &shape, limit)?;
    match sort {
        Sort::None => {}
        // Stable sorts, like glibc's qsort on these sizes.
        Sort::Asc => points.sort_by(|x, y| x.dist.total_cmp(&y.dist)),
        Sort::Desc => points.sort_by(|x, y| y.dist.total_cmp(&x.dist)),
    }
    if count > 0 {
        points.truncate(count as usize);
    }
    for p in &mut points {
        p.dist /= conversion;
    }
    Ok(Some(Found {
        points,
        with_dist,
        with_hash,
        with_coord,
        store_dist,
    }))
}

/// Collects the members inside `shape` from the nine cells around its
/// centre, cell by cell in score order; with `limit` (ANY) it stops once
/// that many are found.
fn scan_cells(r: &dyn KvRead, z: &View, shape: &Shape, limit: usize) -> Result<Vec<Point>, Fail> {
    let cells = geohash::search_cells(shape);
    let mut points = Vec::new();
    let full = |points: &Vec<Point>| limit > 0 && points.len() >= limit;
    // Huge radii make neighbours repeat: Redis skips a cell equal to the
    // last one scanned (but never compares with the centre cell).
    let mut last = 0usize;
    for (i, cell) in cells.iter().enumerate() {
        let Some(cell) = *cell else { continue };
        if last != 0 && cells[last] == Some(cell) {
            continue;
        }
        if full(&points) {
            break;
        }
        let (min, max) = geohash::score_range(cell);
        let (min, max) = (min as f64, max as f64);
        walk_scores(
            r,
            &z.prefix,
            Some((min, max)),
            Order::of(false),
            &mut |m, score| {
                // The range is [min, max): the next cell starts at max.
                if score >= max {
                    return false;
                }
                let (lon, lat) = geohash::position_of(score);
                if let Some(dist) = shape.contains(lon, lat) {
                    points.push(Point {
                        member: m.to_vec(),
                        score,
                        lon,
                        lat,
                        dist,
                    });
                }
                !full(&points)
            },
        )?;
        last = i;
    }
    Ok(points)
}

/// The reply of a search that does not store.
fn found_reply(found: Option<Found>, resp3: bool) -> Reply {
    let Some(f) = found else {
        return Reply::Array(Vec::new());
    };
    let extras = f.with_dist || f.with_hash || f.with_coord;
    let items = f
        .points
        .into_iter()
        .map(|p| {
            if !extras {
                return Reply::bulk(p.member);
            }
            let mut item = vec![Reply::bulk(p.member)];
            if f.with_dist {
                item.push(distance_reply(p.dist));
            }
            if f.with_hash {
                item.push(Reply::Int(p.score as i64));
            }
            if f.with_coord {
                item.push(Reply::Array(vec![
                    coordinate(p.lon, resp3),
                    coordinate(p.lat, resp3),
                ]));
            }
            Reply::Array(item)
        })
        .collect();
    Reply::Array(items)
}

/// The entries a storing search writes: members scored by geohash, or by
/// distance (in the request's unit) with STOREDIST.
fn found_entries(found: Option<Found>) -> Vec<Entry> {
    let Some(f) = found else {
        return Vec::new();
    };
    f.points
        .into_iter()
        .map(|p| (p.member, if f.store_dist { p.dist } else { p.score }))
        .collect()
}

fn search_cmd(s: &mut Session, a: Args, v: Variant) -> Action {
    let src = a.get(if v == Variant::SearchStore { 2 } else { 1 }).clone();
    let dest = if v == Variant::SearchStore {
        Some(a.get(1).clone())
    } else {
        store_key(&a, v)
    };
    let Some(dest) = dest else {
        let resp3 = s.resp3;
        return s.read(&src, move |r, k| Ok(found_reply(find(r, k, &a, v)?, resp3)));
    };
    let limits = s.server.encoding_limits();
    super::load_then_store(
        s,
        vec![src],
        dest,
        move |r, k| find(r, k, &a, v).map(found_entries),
        move |w, kd, mut loaded| {
            // A missing source or an empty result deletes the destination.
            let items = loaded.pop().unwrap_or_default();
            let event = if v == Variant::SearchStore {
                "geosearchstore"
            } else {
                "georadiusstore"
            };
            zset::store_entries(w, kd, &items, event, zset::Build::Whole, &limits)?;
            Ok(Reply::Int(items.len() as i64))
        },
    )
}

/// GEORADIUS key longitude latitude radius M|KM|FT|MI [WITHCOORD]
/// [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC] [STORE key]
/// [STOREDIST key]
pub fn georadius(s: &mut Session, a: Args) -> Action {
    search_cmd(s, a, Variant::Radius)
}

/// GEORADIUS_RO: GEORADIUS without STORE / STOREDIST.
pub fn georadius_ro(s: &mut Session, a: Args) -> Action {
    search_cmd(s, a, Variant::RadiusRo)
}

/// GEORADIUSBYMEMBER key member radius M|KM|FT|MI [options as GEORADIUS]
pub fn georadiusbymember(s: &mut Session, a: Args) -> Action {
    search_cmd(s, a, Variant::ByMember)
}

/// GEORADIUSBYMEMBER_RO: GEORADIUSBYMEMBER without STORE / STOREDIST.
pub fn georadiusbymember_ro(s: &mut Session, a: Args) -> Action {
    search_cmd(s, a, Variant::ByMemberRo)
}

/// GEOSEARCH key FROMMEMBER member|FROMLONLAT longitude latitude
/// BYRADIUS radius unit|BYBOX width height unit [ASC|DESC]
/// [COUNT count [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]
pub fn geosearch(s: &mut Session, a: Args) -> Action {
    search_cmd(s, a, Variant::Search)
}

/// GEOSEARCHSTORE destination source [GEOSEARCH's area and order options]
/// [STOREDIST]
pub fn geosearchstore(s: &mut Session, a: Args) -> Action {
    search_cmd(s, a, Variant::SearchStore)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Args {
        Args::new(
            line.split_whitespace()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect(),
        )
    }

    /// The destination is found the way the option parser walks: the last
    /// STORE/STOREDIST wins, COUNT's value is skipped, a trailing keyword
    /// has no key, and the read-only variants never store.
    #[test]
    fn store_key_prescan() {
        let dest = |line: &str, v| store_key(&args(line), v);
        let b = |s: &'static str| Some(Bytes::from_static(s.as_bytes()));
        assert_eq!(dest("GEORADIUS k 0 0 1 km", Variant::Radius), None);
        assert_eq!(
            dest("GEORADIUS k 0 0 1 km STORE d", Variant::Radius),
            b("d")
        );
        assert_eq!(
            dest("GEORADIUS k 0 0 1 km store a storedist b", Variant::Radius),
            b("b")
        );
        assert_eq!(
            dest("GEORADIUS k 0 0 1 km COUNT store", Variant::Radius),
            None
        );
        assert_eq!(dest("GEORADIUS k 0 0 1 km store", Variant::Radius), None);
        assert_eq!(
            dest("GEORADIUSBYMEMBER k m 1 km STOREDIST d", Variant::ByMember),
            b("d")
        );
        assert_eq!(
            dest("GEORADIUS_RO k 0 0 1 km STORE d", Variant::RadiusRo),
            None
        );
        assert_eq!(dest("GEOSEARCH k STORE d", Variant::Search), None);
    }

    #[test]
    fn units_and_coordinates() {
        assert_eq!(unit(b"KM").unwrap(), 1000.0);
        assert_eq!(unit(b"Mi").unwrap(), 1609.34);
        assert!(unit(b"yd").is_err());
        let a = args("x 181 10");
        assert_eq!(
            lon_lat(&a, 1).unwrap_err(),
            Reply::err("invalid longitude,latitude pair 181.000000,10.000000")
        );
        assert_eq!(
            coordinate(1.5, true),
            Reply::Encoded(Bytes::from_static(b",1.5\r\n"))
        );
    }
}
