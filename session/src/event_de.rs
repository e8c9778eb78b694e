//! Reading an event line: the envelope `{type, seq, time, data}` in one pass, `data` straight into
//! the variant its `type` names (see [`EventData`]'s vocabulary in `event.rs`).

use serde::de::{DeserializeSeed, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::event::{Event, EventData};

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("Event", &["type", "seq", "time", "data"], EventVisitor)
    }
}

/// The envelope's members; any other is refused, as `deny_unknown_fields` would.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Type,
    Seq,
    Time,
    Data,
}

/// Reads an event in one pass when `type` comes before `data`, as every writer of dsh puts it:
/// `data` is then deserialized straight into its variant. A `data` seen before `type` is kept as a
/// `Value` until the type is known.
struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = Event;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an event object {type, seq, time, data}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
        let mut type_name: Option<String> = None;
        let mut seq: Option<u64> = None;
        let mut time: Option<i64> = None;
        let mut data: Option<EventData> = None;
        let mut early: Option<Value> = None;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Type if type_name.is_none() => type_name = Some(map.next_value()?),
                Field::Seq if seq.is_none() => seq = Some(map.next_value()?),
                Field::Time if time.is_none() => time = Some(map.next_value()?),
                Field::Data if data.is_none() && early.is_none() => match &type_name {
                    Some(type_name) => data = Some(map.next_value_seed(DataSeed(type_name))?),
                    None => early = Some(map.next_value()?),
                },
                Field::Type => return Err(A::Error::duplicate_field("type")),
                Field::Seq => return Err(A::Error::duplicate_field("seq")),
                Field::Time => return Err(A::Error::duplicate_field("time")),
                Field::Data => return Err(A::Error::duplicate_field("data")),
            }
        }
        let type_name = type_name.ok_or_else(|| A::Error::missing_field("type"))?;
        let data = match (data, early) {
            (Some(data), _) => data,
            (None, Some(value)) => {
                EventData::deserialize_data(&type_name, value).map_err(A::Error::custom)?
            }
            (None, None) => return Err(A::Error::missing_field("data")),
        };
        Ok(Event {
            seq: seq.ok_or_else(|| A::Error::missing_field("seq"))?,
            time: time.ok_or_else(|| A::Error::missing_field("time"))?,
            data,
        })
    }
}

/// Deserializes `data` as the variant its event's type names.
struct DataSeed<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = EventData;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<EventData, D::Error> {
        EventData::deserialize_data(self.0, deserializer)
    }
}
