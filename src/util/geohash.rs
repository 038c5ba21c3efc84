//! Redis's geohash arithmetic, bit for bit: a position is a 52-bit
//! interleaved geohash (26 bits of longitude, 26 of latitude) stored as a
//! sorted-set score, and a search turns a circle or box into the zset score
//! ranges of nine neighbouring geohash cells.
//!
//! Every formula here keeps Redis's order of floating-point operations,
//! because replies print coordinates to 17 decimals and distances to 4:
//! a reordered sum would show in the last digit.

use std::f64::consts::PI;

/// Westmost longitude a position may have.
pub const LON_MIN: f64 = -180.0;
/// Eastmost longitude a position may have.
pub const LON_MAX: f64 = 180.0;
/// Southmost latitude (EPSG:900913's limit; the poles cannot be indexed).
pub const LAT_MIN: f64 = -85.05112878;
/// Northmost latitude.
pub const LAT_MAX: f64 = 85.05112878;
/// Bits per coordinate in a stored score.
pub const STEP_MAX: u8 = 26;
/// The earth radius Redis measures distances with, in meters.
pub const EARTH_RADIUS_M: f64 = 6372797.560856;
/// Half the earth's circumference in Web Mercator meters: the radius above
/// which the coarsest cells are used.
const MERCATOR_MAX: f64 = 20037726.37;
/// Redis's `M_PI / 180` (not its more precise DEG_TO_RAD constant).
const D_R: f64 = PI / 180.0;

/// An interval of one coordinate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    /// Lower end.
    pub min: f64,
    /// Upper end.
    pub max: f64,
}

/// The coordinate ranges a geohash subdivides.
#[derive(Clone, Copy, Debug)]
struct Frame {
    lon: Span,
    lat: Span,
}

/// The frame of stored scores: latitudes only to ±85.05112878.
const WGS84: Frame = Frame {
    lon: Span {
        min: LON_MIN,
        max: LON_MAX,
    },
    lat: Span {
        min: LAT_MIN,
        max: LAT_MAX,
    },
};

/// The frame of standard geohash strings (what GEOHASH prints).
const STANDARD: Frame = Frame {
    lon: Span {
        min: -180.0,
        max: 180.0,
    },
    lat: Span {
        min: -90.0,
        max: 90.0,
    },
};

/// A geohash cell: `step` bits per coordinate, interleaved into `bits`
/// (longitude in the odd positions, latitude in the even ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hash {
    /// The interleaved bits, `2 * step` of them.
    pub bits: u64,
    /// Bits per coordinate.
    pub step: u8,
}

/// The rectangle a cell covers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Area {
    /// Longitudes.
    pub lon: Span,
    /// Latitudes.
    pub lat: Span,
}

/// Spreads the 32 bits of `v` over the even bit positions of a u64.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    x = (x | (x << 1)) & 0x5555_5555_5555_5555;
    x
}

/// Gathers the even bit positions of `v` back into a u32 ([`spread`]'s
/// inverse).
fn squeeze(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    x as u32
}

/// Encodes a position at `step` bits per coordinate in `frame`; `None`
/// outside the indexable range (or an impossible step).
fn encode_in(frame: Frame, lon: f64, lat: f64, step: u8) -> Option<Hash> {
    if step == 0 || step > 32 {
        return None;
    }
    // Redis checks the indexable limits whatever the frame.
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < frame.lat.min || lat > frame.lat.max || lon < frame.lon.min || lon > frame.lon.max {
        return None;
    }
    let mut lat_offset = (lat - frame.lat.min) / (frame.lat.max - frame.lat.min);
    let mut lon_offset = (lon - frame.lon.min) / (frame.lon.max - frame.lon.min);
    lat_offset *= (1u64 << step) as f64;
    lon_offset *= (1u64 << step) as f64;
    // The offsets truncate to integers; at the upper limit the offset is
    // 2^step itself, one bit wider than the cell (as in Redis).
    let bits = spread(lat_offset as u32) | (spread(lon_offset as u32) << 1);
    Some(Hash { bits, step })
}

/// The area of a cell in `frame`.
fn decode_in(frame: Frame, hash: Hash) -> Area {
    let lat_cell = squeeze(hash.bits);
    let lon_cell = squeeze(hash.bits >> 1);
    let cells = (1u64 << hash.step) as f64;
    let lat_scale = frame.lat.max - frame.lat.min;
    let lon_scale = frame.lon.max - frame.lon.min;
    Area {
        lat: Span {
            min: frame.lat.min + (f64::from(lat_cell) / cells) * lat_scale,
            max: frame.lat.min + (f64::from(lat_cell.wrapping_add(1)) / cells) * lat_scale,
        },
        lon: Span {
            min: frame.lon.min + (f64::from(lon_cell) / cells) * lon_scale,
            max: frame.lon.min + (f64::from(lon_cell.wrapping_add(1)) / cells) * lon_scale,
        },
    }
}

/// Encodes a position at `step` bits per coordinate (`None` outside
/// ±180 / ±85.05112878).
pub fn encode(lon: f64, lat: f64, step: u8) -> Option<Hash> {
    encode_in(WGS84, lon, lat, step)
}

/// The area a cell covers.
pub fn decode(hash: Hash) -> Area {
    decode_in(WGS84, hash)
}

/// A cell's bits moved to the top of 52: the lowest score inside it.
pub fn align52(hash: Hash) -> u64 {
    hash.bits << (52 - u32::from(hash.step) * 2)
}

/// The sorted-set score of a position (GEOADD); `None` outside the
/// indexable range.
pub fn score_of(lon: f64, lat: f64) -> Option<u64> {
    encode(lon, lat, STEP_MAX).map(align52)
}

/// C's `(uint64_t)` conversion of a double as x86-64 code performs it, so
/// that a zset score that is no geohash (negative, fractional, huge)
/// decodes to the same place as in Redis.
fn c_u64(score: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if score < TWO_63 {
        // cvttsd2si: truncation, out of range gives i64::MIN, which
        // Rust's saturating cast also gives for large negatives.
        score as i64 as u64
    } else {
        let rest = score - TWO_63;
        let low = if rest < TWO_63 {
            rest as i64 as u64
        } else {
            1 << 63
        };
        low ^ (1 << 63)
    }
}

/// The position a score stands for: the centre of its 26-bit cell,
/// clamped to the indexable range.
pub fn position_of(score: f64) -> (f64, f64) {
    let area = decode(Hash {
        bits: c_u64(score),
        step: STEP_MAX,
    });
    let lon = ((area.lon.min + area.lon.max) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((area.lat.min + area.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// The 11-character standard geohash of a score (GEOHASH): the decoded
/// position re-encoded with latitudes -90..90. There are only 52 bits, so
/// the last character is always `0`.
pub fn geohash_string(score: f64) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = position_of(score);
    let bits = encode_in(STANDARD, lon, lat, STEP_MAX).map_or(0, |h| h.bits);
    (0..11)
        .map(|i| {
            let idx = if i == 10 {
                0
            } else {
                (bits >> (52 - (i + 1) * 5)) & 0x1f
            };
            ALPHABET[idx as usize] as char
        })
        .collect()
}

fn deg_rad(ang: f64) -> f64 {
    ang * D_R
}

fn rad_deg(ang: f64) -> f64 {
    ang / D_R
}

/// Great-circle (haversine) distance in meters between two positions.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lat1r = deg_rad(lat1);
    let lon1r = deg_rad(lon1);
    let lat2r = deg_rad(lat2);
    let lon2r = deg_rad(lon2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let v = ((lon2r - lon1r) / 2.0).sin();
    2.0 * EARTH_RADIUS_M * (u * u + lat1r.cos() * lat2r.cos() * v * v).sqrt().asin()
}

/// Redis's estimate of the cell size (bits per coordinate) whose cells
/// are about as large as a search radius, coarser near the poles.
pub fn estimate_steps(mut range_m: f64, lat: f64) -> u8 {
    if range_m == 0.0 {
        return STEP_MAX;
    }
    let mut step: i32 = 1;
    while range_m < MERCATOR_MAX {
        range_m *= 2.0;
        step += 1;
    }
    // Two steps coarser, so the radius fits in most base cases.
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, i32::from(STEP_MAX)) as u8
}

/// The shape of a search area.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShapeKind {
    /// A circle of this radius (in the request's unit).
    Circle {
        /// Radius.
        radius: f64,
    },
    /// An axis-aligned box (in the request's unit).
    Box {
        /// East-west extent.
        width: f64,
        /// North-south extent.
        height: f64,
    },
}

/// A search area: a shape around a centre, with the unit's size in meters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// Centre longitude.
    pub lon: f64,
    /// Centre latitude.
    pub lat: f64,
    /// Circle or box.
    pub kind: ShapeKind,
    /// Meters per unit of the shape's sizes (1 for m, 1000 for km...).
    pub conversion: f64,
}

impl Shape {
    /// The distance in meters from the centre to a position inside the
    /// shape, or `None` when the position is outside it. A box tests the
    /// east-west and north-south distances separately, as Redis does.
    pub fn contains(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.kind {
            ShapeKind::Circle { radius } => {
                let d = distance(self.lon, self.lat, lon, lat);
                (d <= radius * self.conversion).then_some(d)
            }
            ShapeKind::Box { width, height } => {
                let (width_m, height_m) = (width * self.conversion, height * self.conversion);
                let lon_distance = distance(lon, lat, self.lon, lat);
                let lat_distance = distance(lon, lat, lon, self.lat);
                if lon_distance > width_m / 2.0 || lat_distance > height_m / 2.0 {
                    return None;
                }
                Some(distance(self.lon, self.lat, lon, lat))
            }
        }
    }

    /// The bounding box of the shape: `[min lon, min lat, max lon, max lat]`.
    /// Longitudes widen towards the pole side of the box, where a meter
    /// spans more degrees.
    fn bounds(&self) -> [f64; 4] {
        let (half_h, half_w) = match self.kind {
            ShapeKind::Circle { radius } => (radius, radius),
            ShapeKind::Box { width, height } => (height / 2.0, width / 2.0),
        };
        let height = self.conversion * half_h;
        let width = self.conversion * half_w;
        let lat_delta = rad_deg(height / EARTH_RADIUS_M);
        let lon_delta_top = rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat + lat_delta).cos());
        let lon_delta_bottom =
            rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat - lat_delta).cos());
        let lon_delta = if self.lat < 0.0 {
            lon_delta_bottom
        } else {
            lon_delta_top
        };
        [
            self.lon - lon_delta,
            self.lat - lat_delta,
            self.lon + lon_delta,
            self.lat + lat_delta,
        ]
    }

    /// The distance in meters from the centre to the farthest point of
    /// the shape (a box's corner), which picks the cell size.
    fn reach_m(&self) -> f64 {
        let r = match self.kind {
            ShapeKind::Circle { radius } => radius,
            ShapeKind::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        };
        r * self.conversion
    }
}

/// Moves a cell one step east (`east`) or west along longitude.
fn move_x(hash: Hash, east: bool) -> Hash {
    let shift = 64 - u32::from(hash.step) * 2;
    let mut x = hash.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let y = hash.bits & 0x5555_5555_5555_5555;
    // The latitude bits set to ones let a carry through the longitude bits.
    let zz = 0x5555_5555_5555_5555u64 >> shift;
    if east {
        x = x.wrapping_add(zz + 1);
    } else {
        x = (x | zz).wrapping_sub(zz + 1);
    }
    x &= 0xaaaa_aaaa_aaaa_aaaau64 >> shift;
    Hash {
        bits: x | y,
        step: hash.step,
    }
}

/// Moves a cell one step north (`north`) or south along latitude.
fn move_y(hash: Hash, north: bool) -> Hash {
    let shift = 64 - u32::from(hash.step) * 2;
    let x = hash.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let mut y = hash.bits & 0x5555_5555_5555_5555;
    let zz = 0xaaaa_aaaa_aaaa_aaaau64 >> shift;
    if north {
        y = y.wrapping_add(zz + 1);
    } else {
        y = (y | zz).wrapping_sub(zz + 1);
    }
    y &= 0x5555_5555_5555_5555u64 >> shift;
    Hash {
        bits: x | y,
        step: hash.step,
    }
}

/// The eight neighbours of a cell in Redis's order: north, south, east,
/// west, north-east, north-west, south-east, south-west. Moving past ±180
/// wraps around; moving past a latitude limit wraps too (Redis does not
/// special-case it either).
pub fn neighbors(h: Hash) -> [Hash; 8] {
    [
        move_y(h, true),
        move_y(h, false),
        move_x(h, true),
        move_x(h, false),
        move_y(move_x(h, true), true),
        move_y(move_x(h, false), true),
        move_y(move_x(h, true), false),
        move_y(move_x(h, false), false),
    ]
}

/// The cells a search must scan: the centre's cell then its eight
/// neighbours (in [`neighbors`]' order), `None` for a neighbour that lies
/// wholly outside the shape's bounding box.
pub fn search_cells(shape: &Shape) -> [Option<Hash>; 9] {
    let [min_lon, min_lat, max_lon, max_lat] = shape.bounds();
    let mut steps = estimate_steps(shape.reach_m(), shape.lat);
    // The centre was validated, so encoding succeeds; Redis would use a
    // zero cell otherwise.
    let cell = |step| encode(shape.lon, shape.lat, step).unwrap_or(Hash { bits: 0, step });
    let mut hash = cell(steps);
    let mut around = neighbors(hash);
    // When the estimated cells are too small for the box at its edges, go
    // one step coarser.
    let [n, s, e, w] = [around[0], around[1], around[2], around[3]].map(decode);
    let too_small =
        n.lat.max < max_lat || s.lat.min > min_lat || e.lon.max < max_lon || w.lon.min > min_lon;
    if steps > 1 && too_small {
        steps -= 1;
        hash = cell(steps);
        around = neighbors(hash);
    }
    let area = decode(hash);
    let mut out: [Option<Hash>; 9] = [None; 9];
    out[0] = Some(hash);
    for (slot, h) in out[1..].iter_mut().zip(around) {
        *slot = Some(h);
    }
    // Drop the neighbours beyond the bounding box.
    if steps >= 2 {
        // Indexes into `out`: 1 N, 2 S, 3 E, 4 W, 5 NE, 6 NW, 7 SE, 8 SW.
        let mut drop = |idx: [usize; 3]| idx.iter().for_each(|&i| out[i] = None);
        if area.lat.min < min_lat {
            drop([2, 8, 7]);
        }
        if area.lat.max > max_lat {
            drop([1, 5, 6]);
        }
        if area.lon.min < min_lon {
            drop([4, 8, 6]);
        }
        if area.lon.max > max_lon {
            drop([3, 7, 5]);
        }
    }
    out
}

/// The score range `[min, max)` holding every position inside a cell.
pub fn score_range(hash: Hash) -> (u64, u64) {
    let next = Hash {
        bits: hash.bits + 1,
        step: hash.step,
    };
    (align52(hash), align52(next))
}

/// Redis's `%.17Lf` of a coordinate with trailing zeros (and a bare `.`)
/// removed, the form GEOPOS and WITHCOORD print.
pub fn human_coordinate(v: f64) -> String {
    // A double widened to long double is exact, and Rust's fixed-precision
    // formatting is exact and rounds ties to even like glibc's printf.
    let mut s = format!("{v:.17}");
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s == "-0" {
        s = "0".to_owned();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const PALERMO: (f64, f64) = (13.361389, 38.115556);
    const CATANIA: (f64, f64) = (15.087269, 37.502669);

    /// Scores, positions and strings Redis gives for its own examples.
    #[test]
    fn sicily_matches_redis() {
        let p = score_of(PALERMO.0, PALERMO.1).unwrap();
        let c = score_of(CATANIA.0, CATANIA.1).unwrap();
        assert_eq!(p, 3479099956230698);
        assert_eq!(c, 3479447370796909);
        let (lon, lat) = position_of(p as f64);
        assert_eq!(human_coordinate(lon), "13.36138933897018433");
        assert_eq!(human_coordinate(lat), "38.11555639549629859");
        assert_eq!(geohash_string(p as f64), "sqc8b49rny0");
        assert_eq!(geohash_string(c as f64), "sqdtr74hyu0");
        let (clon, clat) = position_of(c as f64);
        assert_eq!(
            format!("{:.4}", distance(lon, lat, clon, clat)),
            "166274.1516"
        );
    }

    #[test]
    fn interleave_round_trips() {
        for v in [0u32, 1, 0x3ff_ffff, 0xdead_beef, u32::MAX] {
            assert_eq!(squeeze(spread(v)), v);
            assert_eq!(squeeze(spread(v) << 1 >> 1), v);
        }
        assert_eq!(spread(0b11), 0b101);
    }

    #[test]
    fn limits_and_out_of_range() {
        assert!(score_of(180.0, LAT_MAX).is_some());
        assert!(score_of(-180.0, LAT_MIN).is_some());
        assert!(score_of(180.0001, 0.0).is_none());
        assert!(score_of(0.0, 85.06).is_none());
        let (lon, lat) = position_of(score_of(180.0, LAT_MAX).unwrap() as f64);
        assert_eq!((lon, lat), (LON_MAX, LAT_MAX), "clamped to the limits");
    }

    #[test]
    fn neighbours_wrap_and_step() {
        let h = encode(0.0, 0.0, 2).unwrap();
        let [n, s, e, w, ..] = neighbors(h);
        let a = decode(h);
        assert_eq!(decode(n).lat.min, a.lat.max);
        assert_eq!(decode(s).lat.max, a.lat.min);
        assert_eq!(decode(e).lon.min, a.lon.max);
        assert_eq!(decode(w).lon.max, a.lon.min);
        // West of the westmost cell is the eastmost one.
        let west_edge = encode(-180.0, 0.0, 3).unwrap();
        assert_eq!(decode(neighbors(west_edge)[3]).lon.max, 180.0);
    }

    #[test]
    fn steps_estimate() {
        assert_eq!(estimate_steps(0.0, 0.0), 26);
        assert_eq!(estimate_steps(200_000.0, 37.0), 6);
        assert_eq!(estimate_steps(200_000.0, 70.0), 5);
        assert_eq!(estimate_steps(200_000.0, -85.0), 4);
        assert_eq!(estimate_steps(1e9, 0.0), 1);
        assert_eq!(estimate_steps(0.001, 0.0), 26);
    }

    #[test]
    fn shapes() {
        let circle = Shape {
            lon: 15.0,
            lat: 37.0,
            kind: ShapeKind::Circle { radius: 200.0 },
            conversion: 1000.0,
        };
        let (plon, plat) = position_of(score_of(PALERMO.0, PALERMO.1).unwrap() as f64);
        let d = circle.contains(plon, plat).unwrap();
        assert_eq!(format!("{:.4}", d / 1000.0), "190.4424");
        let cells = search_cells(&circle);
        assert!(cells[0].is_some());
        let boxed = Shape {
            kind: ShapeKind::Box {
                width: 400.0,
                height: 400.0,
            },
            ..circle
        };
        assert!(boxed.contains(plon, plat).is_some());
        let narrow = Shape {
            kind: ShapeKind::Box {
                width: 10.0,
                height: 400.0,
            },
            ..circle
        };
        assert!(narrow.contains(plon, plat).is_none());
    }

    #[test]
    fn score_conversion_like_c() {
        assert_eq!(c_u64(5.9), 5);
        assert_eq!(c_u64(-5.0), (-5i64) as u64);
        assert_eq!(c_u64(1e30), 0);
        assert_eq!(c_u64(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(c_u64(9_223_372_036_854_775_808.0), 1 << 63);
    }

    #[test]
    fn coordinate_text() {
        assert_eq!(human_coordinate(1.5), "1.5");
        assert_eq!(human_coordinate(-0.0), "0");
        assert_eq!(human_coordinate(180.0), "180");
    }
}
